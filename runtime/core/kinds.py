"""Note [Argument kinds]
Each schema argument is passed to a lowering in one of three ways. Tensors
(TENSOR, OPT_TENSOR, TENSOR_LIST) are JAX arrays. Scalars (SCALAR: `Scalar`,
`Scalar?`) are runtime operands, so a new learning rate or `alpha` never compiles
anything; PyTorch's promotion sees them as Python scalars (JAX marks them weakly
typed). Everything else (ATTR, ATTR_LIST: dims, sizes, flags, dtypes, strings) is
static: part of the executable's cache key, and lists are passed as tuples.

The one list of kinds: the runtime imports it, and the generator (codegen/model.py),
which never imports the runtime, loads this file by its path. So it imports nothing.
"""

TENSOR = "TENSOR"
OPT_TENSOR = "OPT_TENSOR"
TENSOR_LIST = "TENSOR_LIST"
SCALAR = "SCALAR"
ATTR = "ATTR"
ATTR_LIST = "ATTR_LIST"

STATIC_KINDS = (ATTR, ATTR_LIST)
