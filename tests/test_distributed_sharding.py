"""Sharded tensors (docs/distributed.md, "Sharded tensors"): on meshes (8,), (2, 4),
(4, 2) and (2, 2, 2) of simulated CPU devices (one subprocess for all), eager ops,
views and in-place ops give PyTorch CPU's values and the placements DTensor would
give; compile(), the torch.compile backend and jax_jit carry the layouts into their
programs; a layout that does not divide evenly still gives the right values."""

from __future__ import annotations

import pytest

from distributed_harness import run_group

MESHES = ["8", "2x4", "4x2", "2x2x2"]
UNEVEN = ["8", "2x4"]


def sharded(mesh: str) -> dict:
    """The sharding group's results on `mesh` (one subprocess runs every mesh)."""
    return run_group("sharding", ",".join(MESHES))[mesh]
NAMES = {1: ("x",), 2: ("dp", "tp"), 3: ("dp", "tp", "sp")}
TOL = 1e-5


def layouts(ndim: int) -> dict[str, list[str]]:
    """The layouts the worker distributes a (16, 8) tensor by, as placement reprs."""
    out = {"replicated": ["Replicate()"] * ndim, "rows": ["Shard(dim=0)"] + ["Replicate()"] * (ndim - 1),
           "rows_all": ["Shard(dim=0)"] * ndim}
    if ndim > 1:
        out["rows_cols"] = ["Shard(dim=0)"] * (ndim - 1) + ["Shard(dim=1)"]
    else:
        out["cols"] = ["Shard(dim=1)"]
    return out


def shown(ps: list[str]) -> str:
    return "(" + ", ".join(ps) + ("," if len(ps) == 1 else "") + ")"


def mapped(ps: list[str], rule: dict[str, str]) -> str:
    return shown([rule.get(p, p) for p in ps])


def spec(ndim_mesh: int, ps: list[str]) -> str:
    """The PartitionSpec JAX holds a (16, 8) tensor in."""
    names = NAMES[ndim_mesh]
    dims: list[list[str]] = [[], []]
    for name, p in zip(names, ps):
        if p.startswith("Shard"):
            dims[int(p[len("Shard(dim="):-1])].append(name)
    entries = ["None" if not d else repr(d[0]) if len(d) == 1 else repr(tuple(d)) for d in dims]
    return f"P({', '.join(entries)})"


CASES = [(m, name) for m in MESHES for name in layouts(len(m.split("x")))]


@pytest.mark.parametrize("mesh,layout", CASES)
def test_distributed_tensor(mesh, layout):
    ndim = len(mesh.split("x"))
    ps = layouts(ndim)[layout]
    r = sharded(mesh)[layout]
    assert r["placements"] == shown(ps) and r["device"] == "jax:0" and r["value"] == 0
    assert r["spec"] == spec(ndim, ps)
    sizes = [int(s) for s in mesh.split("x")]
    split = 1
    for size, p in zip(sizes, ps):
        split *= size if p.startswith("Shard") else 1
    assert r["blocks"] == split  # distinct blocks of the array over the devices


@pytest.mark.parametrize("mesh,layout", CASES)
def test_eager_ops_run_sharded_with_dtensors_placements(mesh, layout):
    ps = layouts(len(mesh.split("x")))[layout]
    r = sharded(mesh)[layout]
    assert r["elementwise"] == [0.0, shown(ps)]
    assert r["exp"] < TOL
    assert r["transpose"] == [0.0, mapped(ps, {"Shard(dim=0)": "Shard(dim=1)", "Shard(dim=1)": "Shard(dim=0)"})]
    assert r["sum0"][0] < TOL
    assert r["sum0"][1] == mapped(ps, {"Shard(dim=0)": "Replicate()", "Shard(dim=1)": "Shard(dim=0)"})
    assert r["matmul"][0] < TOL
    assert r["matmul"][1] == mapped(ps, {"Shard(dim=1)": "Replicate()"})  # the split contracted dim is all-reduced


@pytest.mark.parametrize("mesh,layout", CASES)
def test_views_of_sharded_tensors(mesh, layout):
    r = sharded(mesh)[layout]
    for view in ("view", "slice", "select", "unsqueeze"):
        assert r[view] == 0, view


@pytest.mark.parametrize("mesh,layout", CASES)
def test_in_place_ops_keep_the_layout(mesh, layout):
    ndim = len(mesh.split("x"))
    ps = layouts(ndim)[layout]
    r = sharded(mesh)[layout]
    for op in ("add_", "mul_", "copy_", "view_write", "transposed_view_write"):
        value_err, placements, held = r[op]
        assert value_err < TOL, op
        assert placements == shown(ps), op
        assert held == spec(ndim, ps), op  # the values are still split so, not only labelled


@pytest.mark.parametrize("mesh", MESHES)
def test_compiled_programs_with_sharded_inputs(mesh):
    r = sharded(mesh)
    # four calls, at most one compilation (none when an earlier mesh's run compiled the
    # same graph: jax.jit specializes it to these layouts itself)
    assert r["compiled"]["err"] < TOL and r["compiled"]["compiles"] <= 1
    ps = list(layouts(len(mesh.split("x"))).values())[-1]
    assert r["compiled"]["placements"] == mapped(ps, {"Shard(dim=1)": "Replicate()"})
    # a compiled in-place update writes the parameter back in its layout
    assert r["compiled_in_place"]["err"] < TOL
    assert r["compiled_in_place"]["placements"] == shown(ps)
    assert r["compiled_in_place"]["spec"] == spec(len(mesh.split("x")), ps)


@pytest.mark.parametrize("mesh", MESHES)
def test_lazy_mode_keeps_the_layouts(mesh):
    r = sharded(mesh)["lazy"]
    ps = list(layouts(len(mesh.split("x"))).values())[-1]
    assert r["err"] < TOL
    assert r["placements"] == r["out_placements"] == shown(ps)
    assert r["spec"] == spec(len(mesh.split("x")), ps)


@pytest.mark.parametrize("mesh", MESHES)
def test_mark_sharding_in_place(mesh):
    r = sharded(mesh)["mark_sharding"]
    ndim = len(mesh.split("x"))
    assert r["same_object"] and r["err"] == 0
    assert r["placements"] == shown(["Shard(dim=0)"] + ["Replicate()"] * (ndim - 1))


@pytest.mark.parametrize("mesh", MESHES)
def test_torch_compile_backend_with_noted_layouts(mesh):
    assert sharded(mesh)["dynamo"] < TOL


@pytest.mark.parametrize("mesh", MESHES)
def test_jax_jit_in_and_out_shardings(mesh):
    r = sharded(mesh)["jax_jit"]
    names = NAMES[len(mesh.split("x"))]
    assert r["err"] < TOL and r["spec"] == f"P(None, {names[-1]!r})"


def test_visualize_shows_which_devices_hold_which_block():
    text = sharded("2x4")["visualize"]
    assert text.splitlines() == [
        "tensor of shape (16, 8), torch.float32, on DeviceMesh('jax', (dp=2, tp=4)) as (Shard(dim=0), Shard(dim=1))",
        "  rows  cols 0:2  cols 2:4  cols 4:6  cols 6:8",
        "  0:8   jax:0     jax:1     jax:2     jax:3",
        "  8:16  jax:4     jax:5     jax:6     jax:7",
    ]


@pytest.mark.parametrize("mesh", UNEVEN)
def test_uneven_split(mesh):
    """A (10, 6) tensor split by 8 along dim 0 (or by 2 and 4 along its dims): JAX holds
    arrays at rest evenly split, so the dim that does not divide stays whole there,
    the placements keep what was asked, and compiled programs apply that split."""
    r = run_group("uneven", ",".join(UNEVEN))[mesh]
    ndim = len(mesh.split("x"))
    assert r["placements"] == shown(["Shard(dim=0)"] + ["Shard(dim=1)"] * (ndim - 1))
    assert r["spec"] == ("P(None, None)" if mesh == "8" else "P('dp', None)")
    for op in ("value", "elementwise", "sum0", "sum1", "matmul", "transpose", "compiled"):
        assert r[op] < TOL, op
    assert r["add_"][0] < TOL and r["add_"][2] == r["spec"]
    want = '[{"x"}, {}]' if mesh == "8" else '[{"dp"}, {"tp"}]'
    assert any(want in line for line in r["program"]), r["program"]
    assert "do not divide evenly" in r["visualize"]
