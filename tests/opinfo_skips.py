"""The one table of OpInfo skips and expected failures, each with its reason.

Keys are OpInfo keys as the harness spells them: the OpInfo's name, plus
`.<variant_test_name>` when it has one (`normal.number_mean`). A value of None for a
dtype or mode means "every dtype" / "every mode".

- NONDETERMINISTIC: OpInfos whose values PyTorch does not define (random numbers,
  uninitialised memory). The sweep compares only output shape and dtype with PyTorch
  CPU, and for random ones that the same seed gives the same values on our side; the
  distributions are checked in tests/test_opinfo.py.
- SKIPS: (key, dtype, mode) -> reason: not run at all (the harness would hang or the
  check does not apply). Counted as skipped in the report.
- XFAILS: (key, dtype, mode) -> reason: known failures. The sweep still runs and
  counts them; tests/test_opinfo.py accepts a failure only where listed here.
"""

from __future__ import annotations

# Values drawn from a random generator: same seed gives the same values on our side,
# but JAX's stream is not PyTorch's, so values are never compared with PyTorch CPU.
RANDOM = {
    "bernoulli": "random numbers",
    "cauchy": "random numbers",
    "exponential": "random numbers",
    "geometric": "random numbers",
    "log_normal": "random numbers",
    "multinomial": "random numbers",
    "nn.functional.alpha_dropout": "random numbers",
    "nn.functional.dropout": "random numbers",
    "nn.functional.dropout2d": "random numbers",
    "nn.functional.dropout3d": "random numbers",
    "nn.functional.feature_alpha_dropout.with_train": "random numbers",
    "nn.functional.feature_alpha_dropout.without_train": "random numbers (identity without training, still seeded)",
    "nn.functional.fractional_max_pool2d": "random numbers (window offsets drawn with torch.rand)",
    "nn.functional.fractional_max_pool3d": "random numbers (window offsets drawn with torch.rand)",
    "nn.functional.rrelu": "random numbers",
    "normal": "random numbers",
    "pca_lowrank": "random numbers (a random projection drawn with torch.randn)",
    "normal.number_mean": "random numbers",
    "normal.in_place": "random numbers",
    "rand_like": "random numbers",
    "randint": "random numbers",
    "randint_like": "random numbers",
    "randn": "random numbers",
    "randn_like": "random numbers",
    "svd_lowrank": "random numbers (a random projection drawn with torch.randn)",
    "uniform": "random numbers",
}

# OpInfos some of whose samples draw random numbers (dropout on): those samples are
# compared like RANDOM ones (shape and dtype, gradients too). sample -> bool, given the
# sample's (input, args, kwargs).
RANDOM_SAMPLES = {
    "nn.functional.scaled_dot_product_attention": lambda inp, args, kwargs: kwargs.get("dropout_p", 0.0) > 0,
    # multi_head_attention_forward(query, key, value, embed_dim, num_heads, in_proj_weight,
    # in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, ...)
    "nn.functional.multi_head_attention_forward": lambda inp, args, kwargs: (
        kwargs.get("training", True) and len(args) > 9 and args[9] > 0
    ),
}

# Values are whatever the allocator held: only shape and dtype are defined.
UNINITIALISED = {
    "empty": "uninitialised memory",
    "empty_like": "uninitialised memory",
    "empty_permuted": "uninitialised memory",
    "empty_strided": "uninitialised memory",
    "new_empty": "uninitialised memory",
    "new_empty_strided": "uninitialised memory",
}

NONDETERMINISTIC = {**RANDOM, **UNINITIALISED}

_SPARSE = "the samples are sparse CSR tensors; the backend has dense layouts only (to_xla rejects sparse tensors)"

_COMPLEX32 = "the result is complex32, which JAX has no dtype for (to_xla and every op reject it)"

SKIPS: dict[tuple[str, str | None, str | None], str] = {
    ("chalf", None, None): _COMPLEX32,
    ("complex", "float16", None): _COMPLEX32,
    ("view_as_complex", "float16", None): _COMPLEX32,
    ("sparse.mm.reduce", None, None): _SPARSE,
    ("sparse.sampled_addmm", None, None): _SPARSE,
    ("as_strided.partial_views", None, None): (
        "the samples are views whose as_strided reads storage outside the view; moving a tensor to another "
        "device (to_xla, like Tensor.to) copies only the view's elements, so that storage does not exist there"
    ),
}

_BACKWARD = "the backward formula reaches an aten operator the manifest lacks: "

XFAILS: dict[tuple[str, str | None, str | None], str] = {}


def _lookup(table: dict, key: str, dtype: str, mode: str) -> str | None:
    for k in ((key, dtype, mode), (key, None, mode), (key, dtype, None), (key, None, None)):
        if k in table:
            return table[k]
    return None


def skip_reason(key: str, dtype: str, mode: str) -> str | None:
    return _lookup(SKIPS, key, dtype, mode)


def xfail_reason(key: str, dtype: str, mode: str) -> str | None:
    return _lookup(XFAILS, key, dtype, mode)
