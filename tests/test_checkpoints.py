"""Saving and loading moved models: safetensors (save_file, save_model, load_file,
load_model), transformers' save_pretrained and torch.save write the bytes the CPU model
writes and load back into a moved model; storages identify shared memory as CPU ones do
(Note [Device addresses] in runtime/core/device_storage.py); copy.deepcopy of moved
tensors and modules."""

from __future__ import annotations

import copy
import io
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

import xla_native_functions as xnf
from xla_native_functions.runtime.core.tensor import XlaTensor


class Net(torch.nn.Module):
    def __init__(self, tie: bool = False):
        super().__init__()
        self.emb = torch.nn.Embedding(6, 4)
        self.conv = torch.nn.Conv1d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm1d(4)
        self.head = torch.nn.Linear(4, 6, bias=False)
        if tie:
            self.head.weight = self.emb.weight

    def forward(self, ids):
        h = self.emb(ids).transpose(1, 2)
        h = self.bn(self.conv(h)).transpose(1, 2)
        return self.head(h)


def _pair(tie=False):
    torch.manual_seed(0)
    cpu = Net(tie)
    with torch.no_grad():  # non-trivial buffers
        cpu.bn.running_mean.uniform_()
        cpu.bn.num_batches_tracked += 3
    moved = Net(tie)
    moved.load_state_dict(cpu.state_dict())
    return cpu, xnf.to_xla(moved)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def test_safetensors_save_file_writes_the_cpu_bytes(tmp_path):
    cpu, moved = _pair()
    save_file(cpu.state_dict(), tmp_path / "cpu.safetensors")
    save_file(moved.state_dict(), tmp_path / "moved.safetensors")
    assert _read(tmp_path / "moved.safetensors") == _read(tmp_path / "cpu.safetensors")


def test_safetensors_load_file_into_moved_model(tmp_path):
    cpu, _ = _pair()
    save_file(cpu.state_dict(), tmp_path / "w.safetensors")
    target = xnf.to_xla(Net())
    target.load_state_dict(load_file(tmp_path / "w.safetensors"))
    for name, value in target.state_dict().items():
        assert isinstance(value, XlaTensor), name
        torch.testing.assert_close(xnf.to_torch(value), cpu.state_dict()[name], rtol=0, atol=0)
    ids = torch.tensor([[0, 3, 5, 1]])
    cpu.eval(), target.eval()
    torch.testing.assert_close(xnf.to_torch(target(xnf.to_xla(ids))), cpu(ids))


def test_safetensors_refuses_shared_tensors_as_on_cpu(tmp_path):
    # Tied weights share memory: save_file refuses them on the CPU, and so it does for a
    # moved model (were each tensor its own storage, it would write two copies).
    cpu, moved = _pair(tie=True)
    for model, name in ((cpu, "cpu"), (moved, "moved")):
        with pytest.raises(RuntimeError, match="Some tensors share memory"):
            save_file(model.state_dict(), tmp_path / f"{name}.safetensors")


def test_safetensors_save_model_and_load_model_with_tied_weights(tmp_path):
    cpu, moved = _pair(tie=True)
    save_model(cpu, tmp_path / "cpu.safetensors")
    save_model(moved, tmp_path / "moved.safetensors")
    assert _read(tmp_path / "moved.safetensors") == _read(tmp_path / "cpu.safetensors")
    target = xnf.to_xla(Net(tie=True))
    missing, unexpected = load_model(target, tmp_path / "moved.safetensors")
    assert (set(missing), list(unexpected)) == (set(), [])
    assert target.head.weight is target.emb.weight
    torch.testing.assert_close(xnf.to_torch(target.emb.weight), cpu.emb.weight, rtol=0, atol=0)


@pytest.mark.parametrize("tie", [False, True])
def test_torch_save_writes_the_cpu_bytes_and_loads_back(tie):
    cpu, moved = _pair(tie=tie)
    buffers = {}
    for name, model in (("cpu", cpu), ("moved", moved)):
        buffers[name] = io.BytesIO()
        torch.save(model.state_dict(), buffers[name])
    assert buffers["moved"].getvalue() == buffers["cpu"].getvalue()
    loaded = torch.load(io.BytesIO(buffers["moved"].getvalue()))
    assert all(type(v) is torch.Tensor for v in loaded.values())
    # tied weights: one storage, saved once (the CPU state dict's sharing)
    assert (loaded["head.weight"].data_ptr() == loaded["emb.weight"].data_ptr()) == tie
    target = xnf.to_xla(Net(tie=tie))
    target.load_state_dict(loaded)
    for name, value in cpu.state_dict().items():
        torch.testing.assert_close(xnf.to_torch(target.state_dict()[name]), value, rtol=0, atol=0)


def test_torch_save_of_a_whole_moved_module_keeps_parameters_and_ties():
    cpu, moved = _pair(tie=True)
    buffer = io.BytesIO()
    torch.save(moved, buffer)
    loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert type(loaded.emb.weight) is torch.nn.Parameter and loaded.emb.weight.requires_grad
    assert loaded.head.weight is loaded.emb.weight
    assert len(list(loaded.parameters())) == len(list(cpu.parameters()))
    torch.testing.assert_close(loaded.conv.weight, cpu.conv.weight, rtol=0, atol=0)


def test_torch_save_of_views_keeps_their_sharing():
    base = torch.arange(12.0).reshape(3, 4)
    moved = xnf.to_xla(base)
    expected, ours = io.BytesIO(), io.BytesIO()
    torch.save({"base": base, "row": base[1], "col": base[:, 2]}, expected)
    torch.save({"base": moved, "row": moved[1], "col": moved[:, 2]}, ours)
    assert ours.getvalue() == expected.getvalue()
    loaded = torch.load(io.BytesIO(ours.getvalue()))
    loaded["base"][1, 2] = 100.0
    assert loaded["row"][2].item() == 100.0 and loaded["col"][1].item() == 100.0


@pytest.mark.parametrize("move", ["to_xla", "Module.to"])
def test_transformers_save_pretrained_writes_the_cpu_bytes(tmp_path, move):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8)
    torch.manual_seed(0)
    cpu = transformers.GPT2LMHeadModel(config)
    moved = transformers.GPT2LMHeadModel(config)
    moved.load_state_dict(cpu.state_dict())
    xnf.to_xla(moved) if move == "to_xla" else moved.to("jax")
    assert moved.lm_head.weight is moved.transformer.wte.weight  # tied: save_pretrained drops one
    cpu.save_pretrained(tmp_path / "cpu")
    moved.save_pretrained(tmp_path / "moved")
    assert _read(tmp_path / "moved" / "model.safetensors") == _read(tmp_path / "cpu" / "model.safetensors")


def test_storage_addresses_identify_shared_memory():
    base = xnf.to_xla(torch.arange(12.0).reshape(3, 4))
    view = base[1]
    other = xnf.to_xla(torch.arange(12.0).reshape(3, 4))
    assert view.storage().data_ptr() == base.storage().data_ptr() != other.storage().data_ptr()
    assert base.data_ptr() == base.storage().data_ptr()  # spans its storage from offset 0
    assert view.data_ptr() - base.data_ptr() == 4 * base.element_size()  # as on the CPU
    assert base.storage().nbytes() == 48 and base.storage().size() == 12
    assert xnf.to_xla(torch.empty(0)).storage().data_ptr() == 0
    with pytest.raises(AttributeError, match="has no host memory.*cpu"):
        base.storage().tolist()


def test_deepcopy_of_a_moved_module_keeps_parameters_and_ties():
    _, moved = _pair(tie=True)
    moved.head.weight.grad = xnf.to_xla(torch.ones(6, 4))
    clone = copy.deepcopy(moved)
    assert clone.head.weight is clone.emb.weight
    assert isinstance(clone.emb.weight, torch.nn.Parameter) and clone.emb.weight.requires_grad
    assert clone.emb.weight._store is not moved.emb.weight._store
    torch.testing.assert_close(xnf.to_torch(clone.emb.weight.grad), torch.ones(6, 4))
    for name, value in moved.state_dict().items():
        torch.testing.assert_close(xnf.to_torch(clone.state_dict()[name]), xnf.to_torch(value), rtol=0, atol=0)
    with torch.no_grad():
        clone.emb.weight.add_(1)
    assert not torch.equal(xnf.to_torch(clone.emb.weight), xnf.to_torch(moved.emb.weight))


def test_deepcopy_of_a_view_copies_its_values():
    # PyTorch's default deepcopy of a tensor subclass whose data_ptr() is not 0 reads
    # host memory; for a view of ours (offset != 0) that killed the process. Subprocess.
    code = textwrap.dedent("""
        import copy, torch, xla_native_functions as xnf
        base = xnf.to_xla(torch.arange(12.0).reshape(3, 4))
        view = base[1]
        c = copy.deepcopy(view)
        assert c.tolist() == [4.0, 5.0, 6.0, 7.0], c
        assert c.data_ptr() != view.data_ptr()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_torch_load_to_our_device_loads_to_the_cpu_with_a_warning():
    """Note [Loading to our device]: map_location="jax" crashed the process."""
    cpu, _ = _pair()
    buffer = io.BytesIO()
    torch.save({"model": cpu.state_dict(), "step": torch.tensor(7)}, buffer)
    for location in ("jax", "jax:0", torch.device("jax", 0)):
        with pytest.warns(UserWarning, match="loads tensors to the CPU"):
            loaded = torch.load(io.BytesIO(buffer.getvalue()), map_location=location)
        assert all(v.device.type == "cpu" for v in loaded["model"].values()) and loaded["step"].item() == 7
    target = xnf.to_xla(Net())
    target.load_state_dict(loaded["model"])
    for name, value in cpu.state_dict().items():
        assert target.state_dict()[name].device.type == "jax"
        torch.testing.assert_close(xnf.to_torch(target.state_dict()[name]), value, rtol=0, atol=0)


def test_torchscript_modules_are_refused_not_loaded_with_garbage():
    """Note [Loading to our device]: torch.jit.load(f, map_location="jax") gave parameters
    holding uninitialized memory, and to_xla mixed a ScriptModule's parameters up."""
    cpu, _ = _pair()
    x = torch.tensor([[0, 3, 5, 1], [2, 2, 4, 0]])
    scripted = torch.jit.script(cpu.eval())
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    for location in ("jax", "jax:0", torch.device("jax", 0)):
        with pytest.raises(RuntimeError, match="TorchScript modules cannot run on the jax device"):
            torch.jit.load(io.BytesIO(buffer.getvalue()), map_location=location)
    loaded = torch.jit.load(io.BytesIO(buffer.getvalue()), map_location="cpu")  # still PyTorch's own
    torch.testing.assert_close(loaded(x), cpu(x))
    with pytest.raises(TypeError, match="TorchScript modules cannot run on the jax device"):
        xnf.to_xla(loaded)
    torch.testing.assert_close(loaded(x), cpu(x))  # left as it was


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_saved_torch_export_program_runs_moved(mode):
    """The alternative the TorchScript refusal names: torch.export.save/load, then move."""
    cpu, _ = _pair()
    x = torch.tensor([[0, 3, 5, 1], [2, 2, 4, 0]])
    buffer = io.BytesIO()
    torch.export.save(torch.export.export(cpu.eval(), (x,)), buffer)
    module = xnf.to_xla(torch.export.load(io.BytesIO(buffer.getvalue())).module())
    run = xnf.compile(module) if mode == "compiled" else module
    for _ in range(3):
        out = run(xnf.to_xla(x))
    assert out.device.type == "jax"
    torch.testing.assert_close(xnf.to_torch(out), cpu(x), rtol=1e-5, atol=1e-6)


def test_a_storage_on_our_device_is_refused_not_a_crash():
    code = textwrap.dedent("""
        import torch, xla_native_functions as xnf
        from xla_native_functions.runtime.platform.device_guard import hooks_missing
        assert hooks_missing() is None, hooks_missing()
        try:
            torch.UntypedStorage(16, device="jax")
        except RuntimeError as error:
            assert "has no PyTorch storages" in str(error), error
            print("refused")
        assert torch.UntypedStorage(0, device="jax").nbytes() == 0
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "refused", (done.returncode, done.stderr[-2000:])
