// The device guard of the "jax" device (PyTorch's PrivateUse1), in C++: Note [Native
// device guard] in device_guard.py. One device, index 0, with one stream; JAX orders
// our computations itself, so there is nothing to switch, record or wait for.

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

struct JaxDeviceGuard final : c10::impl::DeviceGuardImplInterface {
  static Device device() { return Device(DeviceType::PrivateUse1, 0); }
  static Stream stream() { return Stream(Stream::DEFAULT, device()); }

  DeviceType type() const override { return DeviceType::PrivateUse1; }
  Device exchangeDevice(Device) const override { return device(); }
  Device getDevice() const override { return device(); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override { return stream(); }
  Stream getNewStream(Device, int) const override { return stream(); }
  Stream exchangeStream(Stream) const noexcept override { return stream(); }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
};

}  // namespace

extern "C" void xnf_register_device_guard() {
  static JaxDeviceGuard guard;
  c10::impl::DeviceGuardImplRegistrar(DeviceType::PrivateUse1, &guard);
}
