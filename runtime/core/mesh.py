"""Device meshes and placements with torch.distributed.tensor's names, over JAX's mesh.

A `DeviceMesh` wraps a `jax.sharding.Mesh` (axes of automatic sharding: XLA's
partitioner decides what constraints leave open) and the names of the dims it exposes:
slicing a mesh by name (`mesh["tp"]`) keeps the whole JAX mesh and exposes one dim, so
a layout over the slice is replicated over the other dims, which is what each group of
a sliced DeviceMesh holds in PyTorch. Placements (`Shard(dim)`, `Replicate()`,
`Partial()`) say, per exposed mesh dim, how a tensor is laid out; `layout_for` turns
them into a NamedSharding.

One process holds the global value of a tensor, whatever its layout (JAX's single
controller): `Partial` is kept as the placement asked for, while the values are always
the reduced ones (docs/distributed.md).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .tensor import DEVICE_NAME


class Placement:
    """How a tensor is laid out along one dim of a mesh (torch.distributed.tensor's API)."""

    __slots__ = ()

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return False


class Shard(Placement):
    """Split along tensor dim `dim` over the mesh dim."""

    __slots__ = ("dim",)

    def __init__(self, dim: int):
        if not isinstance(dim, int):
            raise TypeError(f"Shard(dim): dim must be an int, not {type(dim).__name__}")
        self.dim = dim

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self) -> int:
        return hash(("Shard", self.dim))

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """A whole copy on every device of the mesh dim."""

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Replicate)

    def __hash__(self) -> int:
        return hash("Replicate")

    def __repr__(self) -> str:
        return "Replicate()"


class Partial(Placement):
    """Pending a reduction over the mesh dim. One process holds the reduced values, so
    this is what the tensor was asked to be; XLA decides where partial sums exist."""

    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op: str = "sum"):
        if reduce_op not in ("sum", "avg", "max", "min"):
            raise ValueError(f"Partial: reduce_op must be 'sum', 'avg', 'max' or 'min', not {reduce_op!r}")
        self.reduce_op = reduce_op

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return reduce_op is None or reduce_op == self.reduce_op

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self) -> int:
        return hash(("Partial", self.reduce_op))

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"


def as_placement(p: Any) -> Placement:
    """Ours, or torch.distributed.tensor's (read through the methods both have)."""
    if isinstance(p, Placement):
        return p
    if hasattr(p, "is_shard") and hasattr(p, "is_replicate"):
        if p.is_shard():
            return Shard(p.dim)
        if p.is_replicate():
            return Replicate()
        if p.is_partial():
            return Partial(str(getattr(p, "reduce_op", "sum")))
    raise TypeError(f"{p!r} is not a placement: use Shard(dim), Replicate() or Partial()")


def _auto_mesh(devices: np.ndarray, names: tuple[str, ...]) -> Mesh:
    return Mesh(devices, names, axis_types=(AxisType.Auto,) * len(names))


class DeviceMesh:
    """A mesh of JAX devices with named dims (torch.distributed's DeviceMesh).

    `DeviceMesh("jax", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))` takes the indices
    of `jax.devices()` (every process's devices: in one process, jax:i is device i);
    `init_device_mesh` builds one of a shape."""

    def __init__(self, device_type: str = DEVICE_NAME, mesh: Any = None, *, mesh_dim_names: Sequence[str] | None = None,
                 _jax_mesh: Mesh | None = None, _dims: tuple[str, ...] | None = None):
        if device_type != DEVICE_NAME:
            raise ValueError(f"DeviceMesh: this mesh is of JAX devices, device_type {DEVICE_NAME!r}, "
                             f"not {device_type!r}")
        if _jax_mesh is None:
            if mesh is None:
                raise TypeError("DeviceMesh needs `mesh`, an array of device indices")
            ids = np.asarray(mesh.tolist() if hasattr(mesh, "tolist") else mesh)
            if ids.dtype.kind not in "iu" or ids.size == 0:
                raise ValueError(f"DeviceMesh: mesh must be a non-empty array of device indices, not {mesh!r}")
            devices = jax.devices()
            if ids.min() < 0 or ids.max() >= len(devices):
                raise ValueError(f"DeviceMesh: device indices must be in 0..{len(devices) - 1}: there are "
                                 f"{len(devices)} JAX devices")
            if len(set(ids.flat)) != ids.size:
                raise ValueError("DeviceMesh: a device appears twice in the mesh")
            names = tuple(mesh_dim_names) if mesh_dim_names is not None else tuple(f"dim{i}" for i in range(ids.ndim))
            if len(names) != ids.ndim:
                raise ValueError(f"DeviceMesh: {len(names)} mesh_dim_names for a mesh of {ids.ndim} dims")
            if len(set(names)) != len(names):
                raise ValueError(f"DeviceMesh: mesh_dim_names must be distinct, not {names}")
            _jax_mesh = _auto_mesh(np.array([devices[i] for i in ids.flat], dtype=object).reshape(ids.shape), names)
        self.jax_mesh = _jax_mesh
        self._dims = tuple(_jax_mesh.axis_names) if _dims is None else _dims
        self.device_type = DEVICE_NAME

    @classmethod
    def from_jax(cls, mesh: Mesh) -> DeviceMesh:
        """A DeviceMesh of a JAX mesh (its axes made automatic, as the runtime's layouts
        are constraints for XLA's partitioner)."""
        if any(t != AxisType.Auto for t in getattr(mesh, "axis_types", ())):
            mesh = _auto_mesh(mesh.devices, tuple(mesh.axis_names))
        return cls(_jax_mesh=mesh)

    # -- torch's DeviceMesh API

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        return self._dims

    @property
    def shape(self) -> tuple[int, ...]:
        sizes = self.jax_mesh.shape
        return tuple(sizes[d] for d in self._dims)

    @property
    def ndim(self) -> int:
        return len(self._dims)

    def size(self, mesh_dim: int | str | None = None) -> int:
        if mesh_dim is None:
            return math.prod(self.shape)
        return self.jax_mesh.shape[self._dim_name(mesh_dim)]

    @property
    def mesh(self) -> np.ndarray:
        """The indices (in jax.devices()) of the devices along the exposed dims, the other
        dims of a sliced mesh at their first position."""
        index = {d: i for i, d in enumerate(jax.devices())}
        ids = np.vectorize(lambda d: index[d], otypes=[np.int64])(self.jax_mesh.devices)
        names = list(self.jax_mesh.axis_names)
        order = [names.index(d) for d in self._dims] + [i for i, n in enumerate(names) if n not in self._dims]
        ids = ids.transpose(order)
        return ids[(Ellipsis,) + (0,) * (len(names) - len(self._dims))] if len(names) > len(self._dims) else ids

    def __getitem__(self, names: str | Sequence[str]) -> DeviceMesh:
        wanted = (names,) if isinstance(names, str) else tuple(names)
        for n in wanted:
            if n not in self._dims:
                raise KeyError(f"mesh dim {n!r} is not in {self._dims}")
        if len(set(wanted)) != len(wanted):
            raise KeyError(f"mesh dims {wanted} repeat a name")
        return DeviceMesh(_jax_mesh=self.jax_mesh, _dims=wanted)

    def _dim_name(self, mesh_dim: int | str) -> str:
        if isinstance(mesh_dim, str):
            if mesh_dim not in self._dims:
                raise KeyError(f"mesh dim {mesh_dim!r} is not in {self._dims}")
            return mesh_dim
        if not -len(self._dims) <= mesh_dim < len(self._dims):
            raise IndexError(f"mesh dim {mesh_dim} is out of range for a mesh of {len(self._dims)} dims")
        return self._dims[mesh_dim]

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DeviceMesh) and other._dims == self._dims and other.jax_mesh == self.jax_mesh

    def __enter__(self) -> DeviceMesh:
        """`with mesh:` makes it the mesh of calls that name none."""
        _CURRENT.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.remove(self)

    def __hash__(self) -> int:
        return hash((self.jax_mesh, self._dims))

    def __repr__(self) -> str:
        dims = ", ".join(f"{n}={s}" for n, s in zip(self._dims, self.shape))
        whole = "" if len(self._dims) == len(self.jax_mesh.axis_names) else \
            f" of {'x'.join(str(s) for s in self.jax_mesh.devices.shape)} devices"
        return f"DeviceMesh('{DEVICE_NAME}', ({dims}){whole})"


_CURRENT: list[DeviceMesh] = []


def current_mesh() -> DeviceMesh | None:
    """The mesh of the innermost `with mesh:` block."""
    return _CURRENT[-1] if _CURRENT else None


def check_placements(mesh: DeviceMesh, placements: Iterable[Any], ndim: int) -> tuple[Placement, ...]:
    """One placement per mesh dim, each valid for a tensor of `ndim` dims."""
    found = tuple(as_placement(p) for p in placements)
    if len(found) != mesh.ndim:
        raise ValueError(f"{len(found)} placements for a mesh of {mesh.ndim} dims {mesh.mesh_dim_names}: give one per "
                         "mesh dim")
    out = []
    for p in found:
        if isinstance(p, Shard):
            if not -max(ndim, 1) <= p.dim < max(ndim, 1) or ndim == 0:
                raise IndexError(f"{p!r}: a tensor of {ndim} dims has no dim {p.dim}")
            p = Shard(p.dim % ndim)
        out.append(p)
    return tuple(out)


def _spec(mesh: DeviceMesh, placements: tuple[Placement, ...], shape: tuple[int, ...], even: bool) -> PartitionSpec:
    per_dim: list[list[str]] = [[] for _ in shape]
    for name, p in zip(mesh.mesh_dim_names, placements):
        if isinstance(p, Shard):
            per_dim[p.dim].append(name)
    sizes = mesh.jax_mesh.shape
    entries = []
    for n, names in zip(shape, per_dim):
        if even:  # JAX keeps an array at rest evenly split: the mesh axes that divide it
            kept = []
            for name in names:
                if n % (math.prod(sizes[k] for k in kept) * sizes[name]) == 0:
                    kept.append(name)
                else:
                    break
            names = kept
        entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    return PartitionSpec(*entries)


def layout_for(mesh: DeviceMesh, placements: tuple[Placement, ...], shape: tuple[int, ...]) -> NamedSharding:
    """The sharding of a tensor of `shape` placed so, as JAX can hold it at rest: a dim
    that does not divide by the mesh dims splitting it stays whole along them."""
    return NamedSharding(mesh.jax_mesh, _spec(mesh, placements, tuple(shape), even=True))


def requested_layout(mesh: DeviceMesh, placements: tuple[Placement, ...], shape: tuple[int, ...]) -> NamedSharding:
    """The sharding asked for, uneven splits included (what compiled programs apply)."""
    return NamedSharding(mesh.jax_mesh, _spec(mesh, placements, tuple(shape), even=False))


def placements_of_layout(layout: NamedSharding, ndim: int, mesh: DeviceMesh | None = None) -> tuple[DeviceMesh, tuple]:
    """The mesh and placements a NamedSharding lays a tensor of `ndim` dims out by."""
    if mesh is None:
        mesh = DeviceMesh.from_jax(layout.mesh)
    spec = tuple(layout.spec) + (None,) * (ndim - len(layout.spec))
    placements = []
    for name in mesh.mesh_dim_names:
        found = Replicate()
        for d, entry in enumerate(spec):
            names = (entry,) if isinstance(entry, str) else tuple(entry or ())
            if name in names:
                found = Shard(d)
                break
        placements.append(found)
    return mesh, tuple(placements)
