"""What the generated code (generated/xla_native_functions/dispatch.py and ir.py) uses of
the runtime: the IR base class and argument kinds, this thread's context, and the
eager, view and write paths. Nothing else of the runtime is imported by generated code
(besides the `supported` implementations it calls), so this list is the contract
between the generator's templates and the runtime."""

from ..core.context import context
from ..core.convert import restore_x64, swap_x64
from ..core.ir import ATTR, ATTR_LIST, OPT_TENSOR, SCALAR, TENSOR, TENSOR_LIST, Node
from .eager import attr_list, operand, operand_opt, operands, scalar_operand, wrap
from .fallback import fallback
from .first_call import tiered_executable as eager_executable  # Note [First calls on PyTorch CPU]
from .keys import next_key
from .mutation import (check_in_place_overlap, donatable, donate, lists_alias, make_view, mixed_dtypes,
                       per_tensor_loop, restride_inplace, round_scalar_to_self, write_each_inplace, write_inplace,
                       write_list_inplace, write_out)

__all__ = [
    "ATTR", "ATTR_LIST", "OPT_TENSOR", "SCALAR", "TENSOR", "TENSOR_LIST", "Node", "attr_list",
    "check_in_place_overlap", "context", "donatable", "donate", "eager_executable", "fallback", "lists_alias",
    "make_view", "mixed_dtypes", "next_key", "operand", "operand_opt", "operands", "per_tensor_loop", "restore_x64",
    "restride_inplace", "round_scalar_to_self", "scalar_operand", "swap_x64", "wrap", "write_each_inplace",
    "write_inplace", "write_list_inplace", "write_out",
]
