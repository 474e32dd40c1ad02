// The device guard of the "jax" device (PyTorch's PrivateUse1), in C++: Note [Native
// device guard] in device_guard.py. One device, index 0, with one stream; JAX orders
// our computations itself, so there is nothing to switch, record or wait for. And the
// device's random generator, `torch.Generator(device="jax")`: Note [Generators of our
// device] in device_guard.py.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <unordered_set>

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
  void synchronizeDevice(const DeviceIndex) const override {}
};

// PyTorch's CPU generator (its seed, state and stream), on our device: its draws
// seed JAX keys, as the default CPU generator's do for ops given no generator. It
// keeps the CPU dispatch key, so that a CPU op given it reaches the CPU kernel, which
// refuses a generator of another device with PyTorch's message.
struct JaxGenerator final : at::CPUGeneratorImpl {
  explicit JaxGenerator(DeviceIndex index) {
    device_ = Device(DeviceType::PrivateUse1, index < 0 ? 0 : index);
  }

  // Philox offsets are CUDA's; pickling asks every non-CPU generator for one.
  uint64_t get_offset() const override { return 0; }
  void set_offset(uint64_t offset) override {
    TORCH_CHECK(offset == 0, "a generator of the jax device has no offset (it is PyTorch's CPU generator)");
  }

 private:
  JaxGenerator* clone_impl() const override {
    auto copy = new JaxGenerator(device_.index());
    copy->set_state(*get_state());
    return copy;
  }
};

// PyTorch storages on our device: there are none, as values live in JAX arrays. With
// no allocator registered, PyTorch dereferenced a null one and the process crashed
// (torch.UntypedStorage(n, device="jax")); this one raises instead. It is a device
// allocator, which torch.accelerator's memory functions ask for: there is no cache to
// empty, and no statistics are kept.
struct NoStorageAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t n) override {
    TORCH_CHECK(n == 0, "the jax device has no PyTorch storages (its values are JAX arrays): make tensors there with "
                "tensor.to(\"jax\") or xla_native_functions.to_xla");
    return {nullptr, nullptr, nullptr, Device(DeviceType::PrivateUse1, 0)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex) override { no_statistics(); }
  void resetAccumulatedStats(DeviceIndex) override { no_statistics(); }
  void resetPeakStats(DeviceIndex) override { no_statistics(); }

 private:
  [[noreturn]] static void no_statistics() {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "memory statistics are not kept for the jax device; jax.live_arrays() lists "
                                "the arrays alive, and their nbytes add up to what they hold");
  }
};

// Pinned memory for our device (DataLoader(pin_memory=True), tensor.pin_memory()):
// plain host memory, since JAX's CPU device reads host memory and there is no transfer
// to speed up; remembered, so that is_pinned() answers true for it.
std::mutex pinned_mutex;
std::unordered_set<const void*> pinned;

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned.erase(data);
  }
  c10::free_cpu(data);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* data = n ? c10::alloc_cpu(n) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned.insert(data);
    }
    return {data, data, &free_pinned, Device(DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// PyTorch asks a device's hooks for its generators and pinned memory. A device
// registered from Python has Python's hooks, which have neither; these answer as those
// do (built, available, with a context) and have both.
struct JaxHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  at::Generator getNewGenerator(DeviceIndex index) const override { return at::make_generator<JaxGenerator>(index); }
  const at::Generator& getDefaultGenerator(DeviceIndex) const override {
    static at::Generator generator = at::make_generator<JaxGenerator>(0);
    return generator;
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    static PinnedAllocator allocator;
    return &allocator;
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    return pinned.count(data) > 0;
  }
};

}  // namespace

// Registered once, before anything asks for the device's hooks (runtime/core/tensor.py),
// with the storage allocator: 0, or 1 if PyTorch refused (hooks were registered already).
extern "C" int xnf_register_hooks() {
  static JaxHooks hooks;
  static NoStorageAllocator no_storage;
  try {
    at::RegisterPrivateUse1HooksInterface(&hooks);
    c10::SetAllocator(DeviceType::PrivateUse1, &no_storage);
    return 0;
  } catch (...) {
    return 1;
  }
}

extern "C" void xnf_register_device_guard() {
  static JaxDeviceGuard guard;
  c10::impl::DeviceGuardImplRegistrar(DeviceType::PrivateUse1, &guard);
}
