"""What the templates render: one OpSpec per aten overload, derived from torchgen's
FunctionSchema. Naming rules live here and only here (docs/adding_ops.md, "Naming")."""

from __future__ import annotations

import importlib.util
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from torchgen.model import (
    Argument,
    BaseTy,
    BaseType,
    FunctionSchema,
    ListType,
    OptionalType,
    Type,
)



def _argument_kinds():
    """The runtime's list of how each argument reaches a lowering (Note [Argument kinds]
    in runtime/core/kinds.py), loaded from its file: that module imports nothing."""
    path = Path(__file__).resolve().parent.parent / "runtime" / "core" / "kinds.py"
    spec = importlib.util.spec_from_file_location("_argument_kinds", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_KINDS = _argument_kinds()
TENSOR, OPT_TENSOR, TENSOR_LIST = _KINDS.TENSOR, _KINDS.OPT_TENSOR, _KINDS.TENSOR_LIST
SCALAR, ATTR, ATTR_LIST = _KINDS.SCALAR, _KINDS.ATTR, _KINDS.ATTR_LIST

_SPECIAL_DEFAULTS = {
    "contiguous_format": "torch.contiguous_format",
    "preserve_format": "torch.preserve_format",
    "strided": "torch.strided",
    "long": "torch.int64",
    "int": "torch.int32",
    "float": "torch.float32",
    "Mean": "1",
    "Sum": "2",
    "None": "None",
    "True": "True",
    "False": "False",
}


def unambiguous_name(op: str) -> str:
    """`add.Tensor` -> `add_Tensor`; `abs` -> `abs` (torchgen's OperatorName.unambiguous_name).
    An operator of another namespace is prefixed with it: `torchvision::nms` ->
    `torchvision_nms`, `mylib::rope.half` -> `mylib_rope_half`."""
    return op.replace("::", "_").replace(".", "_")


def split_namespace(op: str) -> tuple[str, str]:
    """`torchvision::nms` -> (`torchvision`, `nms`); `add.Tensor` -> (`aten`, `add.Tensor`)."""
    ns, sep, rest = op.partition("::")
    return (ns, rest) if sep else ("aten", op)


def torchgen_schema_text(schema_text: str) -> str:
    """A schema as torch prints it, in the form torchgen's FunctionSchema.parse reads: the
    namespace dropped from the name, list defaults without spaces (`[1, 2]` -> `[1,2]`,
    torchgen splits arguments at `, `), float defaults in their shortest form (torch
    prints 1e-6 as `9.9999999999999995e-07`), alias sets as letters (`a0!` -> `a!`)."""
    name, paren, rest = schema_text.partition("(")
    name = name.partition("::")[2] or name
    rest = re.sub(r"=\[([^\]]*)\]", lambda m: "=[" + m.group(1).replace(", ", ",") + "]", rest)
    rest = re.sub(r"=(-?\d+\.\d*(?:e[-+]?\d+)?|-?\d+e[-+]?\d+)(?=[,)])", lambda m: "=" + repr(float(m.group(1))), rest)
    # alias sets: torch numbers them (`Tensor(a0!)`), torchgen reads single letters
    sets: dict[str, str] = {}
    rest = re.sub(
        r"\(([a-z]\d+)(!?)\)", lambda m: f"({sets.setdefault(m.group(1), chr(ord('a') + len(sets)))}{m.group(2)})", rest
    )
    return name + paren + rest


def mangle_safe(name: str) -> str:
    """A name usable inside a class body (see OpSpec.shape_fn_ref)."""
    return "_rt" + name if name.startswith("__") else name


def class_name(name: str) -> str:
    """CamelCase of an unambiguous name, leading underscores kept: `add_Tensor` -> `AddTensor`,
    `_softmax` -> `_Softmax`, `sum_dim_IntList` -> `SumDimIntList`."""
    stripped = name.lstrip("_")
    lead = name[: len(name) - len(stripped)]
    # A trailing underscore marks an in-place op listed on its own (polygamma_ beside
    # polygamma): keep it, or the two classes collide.
    trail = "_" if stripped.endswith("_") else ""
    return lead + "".join(part[:1].upper() + part[1:] for part in stripped.split("_") if part) + trail


def python_name(name: str) -> str:
    """A schema argument name as a Python parameter (torchgen renames keywords: `from` -> `from_`)."""
    return name + "_" if keyword.iskeyword(name) else name


def arg_kind(t: Type) -> str:
    if isinstance(t, BaseType):
        if t.name == BaseTy.Tensor:
            return TENSOR
        if t.name == BaseTy.Scalar:
            return SCALAR
        return ATTR
    if isinstance(t, OptionalType):
        inner = arg_kind(t.elem)
        return {TENSOR: OPT_TENSOR, SCALAR: SCALAR}.get(inner, inner)
    if isinstance(t, ListType):
        return TENSOR_LIST if t.elem.is_tensor_like() else ATTR_LIST
    raise AssertionError(f"unknown type {t}")


def _list_size(t: Type) -> int | None:
    if isinstance(t, OptionalType):
        t = t.elem
    return t.size if isinstance(t, ListType) else None


def default_expr(arg: Argument) -> str | None:
    """The schema default as a Python expression (lists become tuples)."""
    d = arg.default
    if d is None:
        return None
    if d in _SPECIAL_DEFAULTS:
        return _SPECIAL_DEFAULTS[d]
    if re.fullmatch(r"-?\d+(\.\d*)?(e-?\d+)?", d):
        size = _list_size(arg.type)
        # `int[2] padding=0` means [0, 0]: the dispatcher omits an argument equal to its
        # default, so the stub's default must be the list.
        return "(" + (f"{d}, " * size).rstrip(" ") + ")" if size else d
    if d.startswith("[") and d.endswith("]"):
        items = [x.strip() for x in d[1:-1].split(",") if x.strip()]
        return "(" + "".join(f"{x}, " for x in items).rstrip(" ") + ")" if items else "()"
    if d[:1] in ("'", '"'):
        return repr(d[1:-1])
    raise AssertionError(f"no Python form for the default {d!r} of argument {arg.name}")


@dataclass(frozen=True)
class ArgSpec:
    name: str  # Python parameter name
    schema_name: str
    kind: str
    type: str  # schema type text, for docs and messages
    default: str | None  # Python expression
    kwarg_only: bool
    is_out: bool

    @property
    def param(self) -> str:
        return self.name if self.default is None else f"{self.name}={self.default}"

    @property
    def unwrap(self) -> str:
        """How the eager path passes this argument to the executable."""
        return {
            TENSOR: f"_rt_operand({self.name})",
            OPT_TENSOR: f"_rt_operand_opt({self.name})",
            TENSOR_LIST: f"_rt_operands({self.name})",
            ATTR_LIST: f"_rt_attr_list({self.name})",
            SCALAR: f"_rt_scalar({self.name})",
        }.get(self.kind, self.name)


@dataclass(frozen=True)
class OpSpec:
    op: str  # "add.Tensor"
    name: str  # "add_Tensor"
    class_name: str  # "AddTensor"
    section: str
    schema: str
    args: tuple[ArgSpec, ...]  # schema order, out arguments included
    returns: tuple[str, ...]  # return type texts
    is_view: bool
    kind: str  # functional / inplace / out / mutable
    functional: str | None  # for a derived variant: the unambiguous name of its functional op
    # an out= form of a factory (arange.start_out): PyTorch computes in the out tensor's
    # dtype, which the functional op takes as its `dtype` argument (see generate.py)
    dtype_from_out: bool = False
    # an in-place form: which operands sharing memory with `self` PyTorch rejects
    # ("partial" or "any" overlap; see PARTIAL_OVERLAP_CHECKED in generate.py), or ""
    overlap_check: str = ""
    # an in-place form: the Scalar arguments PyTorch converts to self's dtype before
    # computing (the manifest's policy inplace_rounds_scalar_to_self)
    scalars_to_self: tuple[str, ...] = ()
    # its lowering takes a keyword-only `ctx` (a LoweringContext: a random key) after the
    # schema's parameters; the IR node then has one more operand, the key
    ctx: bool = False
    # an out= form: PyTorch wants the out tensor in exactly the result's dtype, or
    # rejects an out tensor that is one of the inputs (the manifest's policy)
    out_exact_dtype: bool = False
    out_distinct_from_inputs: bool = False
    # an in-place form that writes arguments besides its first (GradScaler's
    # _amp_update_scale_ writes the scale and its growth tracker): their names, in schema
    # order; the functional form returns their new values after the first's
    writes_also: tuple[str, ...] = ()

    @property
    def node_arg_names(self) -> tuple[str, ...]:
        """The IR node's operands: the schema's inputs, and the key of a lowering with ctx."""
        return tuple(a.name for a in self.inputs) + (("key",) if self.ctx else ())

    @property
    def node_arg_kinds(self) -> tuple[str, ...]:
        return tuple(a.kind for a in self.inputs) + ((TENSOR,) if self.ctx else ())

    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if not a.is_out)

    @property
    def outs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.is_out)

    def signature(self, include_out: bool = True) -> str:
        """The Python parameter list, keyword-only arguments after `*`."""
        args = self.args if include_out else self.inputs
        parts = [a.param for a in args if not a.kwarg_only]
        kw = [a.param for a in args if a.kwarg_only]
        if kw:
            parts.append("*")
            parts.extend(kw)
        return ", ".join(parts)

    @property
    def tensor_inputs(self) -> str:
        """The tensor-valued inputs as a tuple expression (an out= stub checks that its
        outputs do not overlap them)."""
        names = [a.name for a in self.inputs if a.kind in (TENSOR, OPT_TENSOR, TENSOR_LIST)]
        return "(" + "".join(f"{n}, " for n in names).rstrip(" ") + ")"

    def call_args(self) -> str:
        """Arguments forwarding this op's inputs by name to a function of the same schema."""
        parts = [a.name if not a.kwarg_only else f"{a.name}={a.name}" for a in self.inputs]
        if self.dtype_from_out:
            parts.append(f"dtype={self.outs[0].name}.dtype")
        return ", ".join(parts)

    def donating_form_of(self, functional: "OpSpec") -> bool:
        """Whether this in-place form may run `functional`'s lowering with self's buffer
        donated (Note [Donated in-place updates] in runtime/exec/mutation.py): `functional` is
        lowered, returns one tensor, and takes this op's inputs, `self` first."""
        return (
            self.kind == "inplace" and not self.is_view and functional.section == "full_codegen"
            and not functional.ctx and functional.returns_kind == "tensor" and bool(functional.inputs)
            and functional.inputs[0].name == "self" and functional.inputs[0].kind == TENSOR
            and [a.name for a in self.inputs] == [a.name for a in functional.inputs]
        )

    @property
    def other_tensor_inputs(self) -> str:
        """The tensor-valued inputs after the first, as a tuple expression."""
        names = [a.name for a in self.inputs[1:] if a.kind in (TENSOR, OPT_TENSOR, TENSOR_LIST)]
        return "(" + "".join(f"{n}, " for n in names).rstrip(" ") + ")"

    @property
    def functional_ref(self) -> str:
        """How a derived variant's stub calls its functional stub (see dispatch.py.j2)."""
        if any(a.name == self.functional for a in self.args):
            return f"_rt_stubs.{self.functional}"
        return self.functional

    @property
    def namespace(self) -> str:
        return split_namespace(self.op)[0]

    def aten_expr(self, aten: str) -> str:
        """A Python expression for this overload's OpOverload, `aten` naming torch.ops.aten
        (an operator of another namespace: `torch.ops.<ns>`, looked up when called)."""
        ns, op = split_namespace(self.op)
        if ns != "aten":
            aten = f"torch.ops.{ns}"
        name, _, overload = op.partition(".")
        overload = overload or "default"
        if keyword.iskeyword(overload):  # random.from
            return f'getattr({aten}.{name}, "{overload}")'
        return f"{aten}.{name}.{overload}"

    @property
    def handwritten_args(self) -> tuple[ArgSpec, ...]:
        """Parameters of the op's handwritten function: an op listed in its out= form
        (it has no functional overload to derive from) takes its out arguments too."""
        return self.args if self.functional is None and self.outs else self.inputs

    def handwritten_call_args(self) -> str:
        return ", ".join(a.name if not a.kwarg_only else f"{a.name}={a.name}" for a in self.handwritten_args)

    def handwritten_signature(self) -> str:
        return self.signature(include_out=self.handwritten_args is self.args)

    @property
    def returns_kind(self) -> str:
        if len(self.returns) == 1:
            r = self.returns[0]
            if r.startswith("Tensor[]"):
                return "list"
            if r.startswith("Tensor"):
                return "tensor"
            return "value"
        if not self.returns:
            return "none"
        return "tuple"

    @property
    def lowering(self) -> str:
        return f"lower_{self.name}"

    @property
    def shape_fn(self) -> str:
        return f"{self.name}_output_shape"

    @property
    def impl(self) -> str:
        return f"impl_{self.name}"

    @property
    def shape_fn_ref(self) -> str:
        """How ir.py calls the shape function from inside the IR class: Python mangles a
        name starting with two underscores there (`__lshift___Tensor_output_shape` in
        class `__LshiftTensor`), so such a function is imported under `_rt` + its name."""
        return mangle_safe(self.shape_fn)

    @property
    def attr_positions(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.inputs) if a.kind in (ATTR, ATTR_LIST))


def make_op_spec(
    op: str, schema_text: str, section: str, is_view: bool, kind: str, functional: str | None = None
) -> OpSpec:
    schema = FunctionSchema.parse(torchgen_schema_text(schema_text) if "::" in op else schema_text)
    kwarg_only = {id(a) for a in schema.arguments.flat_kwarg_only}
    outs = {id(a) for a in schema.arguments.out}
    written = [python_name(a.name) for a in schema.arguments.flat_all
               if id(a) not in outs and a.annotation is not None and a.annotation.is_write]
    args = []
    for a in schema.arguments.flat_all:
        args.append(
            ArgSpec(
                name=python_name(a.name),
                schema_name=a.name,
                kind=arg_kind(a.type),
                type=str(a.type),
                default=default_expr(a),
                kwarg_only=id(a) in kwarg_only or id(a) in outs,
                is_out=id(a) in outs,
            )
        )
    name = unambiguous_name(op)
    return OpSpec(
        op=op,
        name=name,
        class_name=class_name(name),
        section=section,
        schema=schema_text,
        args=tuple(args),
        returns=tuple(str(r.type) for r in schema.returns),
        is_view=is_view,
        kind=kind,
        functional=functional,
        writes_also=tuple(written[1:]) if kind == "inplace" else (),
    )
