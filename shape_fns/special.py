"""Shape functions of the special functions in lowerings/special.py."""

from __future__ import annotations

from .common import checked_meta


def _float(op, *operands, reduced=True):
    return checked_meta(op, *operands, kernel=f"{op}_cpu", categories="float", reduced=reduced)


def erfc_output_shape(self):
    return _float("erfc", self)


def erfinv_output_shape(self):
    return _float("erfinv", self)


def lgamma_output_shape(self):
    return _float("lgamma", self)


def digamma_output_shape(self):
    return _float("digamma", self)


def polygamma_output_shape(n, self):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return _float("polygamma", self)


def mvlgamma_output_shape(self, p):
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    return _float("mvlgamma", self)


def i0_output_shape(self):
    return _float("i0", self)


def special_i0e_output_shape(self):
    return _float("special_i0e", self)


def special_i1_output_shape(self):
    return _float("special_i1", self)


def special_i1e_output_shape(self):
    return _float("special_i1e", self)


def special_modified_bessel_i0_output_shape(self):
    return _float("special_modified_bessel_i0", self, reduced=False)


def special_modified_bessel_i1_output_shape(self):
    return _float("special_modified_bessel_i1", self, reduced=False)


def special_ndtri_output_shape(self):
    return _float("special_ndtri", self, reduced=False)


def special_log_ndtr_output_shape(self):
    return _float("special_log_ndtr", self, reduced=False)


def special_erfcx_output_shape(self):
    return _float("special_erfcx", self, reduced=False)


def special_entr_output_shape(self):
    return _float("special_entr", self)


def sinc_output_shape(self):
    return checked_meta("sinc", self, kernel="sinc_cpu", categories="float complex", reduced=True)


def special_spherical_bessel_j0_output_shape(x):
    return _float("special_spherical_bessel_j0", x, reduced=False)


def special_xlog1py_output_shape(self, other):
    return _float("special_xlog1py", self, other)


def special_xlog1py_self_scalar_output_shape(self, other):
    return _float("special_xlog1py_self_scalar", self, other)


def special_xlog1py_other_scalar_output_shape(self, other):
    return _float("special_xlog1py_other_scalar", self, other)


def special_zeta_output_shape(self, other):
    return _float("special_zeta", self, other, reduced=False)


def special_zeta_self_scalar_output_shape(self, other):
    return _float("special_zeta_self_scalar", self, other, reduced=False)


def special_zeta_other_scalar_output_shape(self, other):
    return _float("special_zeta_other_scalar", self, other, reduced=False)


def ldexp_Tensor_output_shape(self, other):
    return checked_meta("ldexp_Tensor", self, other)


def _no_reduced(op, kernel, x):
    return checked_meta(op, x, kernel=f"{kernel}_cpu", categories="float", reduced=False)


def special_bessel_j0_output_shape(self):
    return _no_reduced("special_bessel_j0", "bessel_j0", self)


def special_bessel_j1_output_shape(self):
    return _no_reduced("special_bessel_j1", "bessel_j1", self)


def special_bessel_y0_output_shape(self):
    return _no_reduced("special_bessel_y0", "bessel_y0", self)


def special_bessel_y1_output_shape(self):
    return _no_reduced("special_bessel_y1", "bessel_y1", self)


def special_modified_bessel_k0_output_shape(self):
    return _no_reduced("special_modified_bessel_k0", "modified_bessel_k0", self)


def special_modified_bessel_k1_output_shape(self):
    return _no_reduced("special_modified_bessel_k1", "modified_bessel_k1", self)


def special_scaled_modified_bessel_k0_output_shape(x):
    return _no_reduced("special_scaled_modified_bessel_k0", "scaled_modified_bessel_k0", x)


def special_scaled_modified_bessel_k1_output_shape(x):
    return _no_reduced("special_scaled_modified_bessel_k1", "scaled_modified_bessel_k1", x)


def special_airy_ai_output_shape(x):
    return _no_reduced("special_airy_ai", "airy_ai", x)


def igamma_output_shape(self, other):
    return checked_meta("igamma", self, other, kernel="igamma_cpu", categories="float")


def igammac_output_shape(self, other):
    return checked_meta("igammac", self, other, kernel="igammac_cpu", categories="float")
