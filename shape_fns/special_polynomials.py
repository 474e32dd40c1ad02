"""Shape functions of the orthogonal polynomials in lowerings/special_polynomials.py:
broadcast shape, integers promoted to the default float, and the CPU kernels' dtype
checks (no float16/bfloat16)."""

from __future__ import annotations

from .common import checked_meta


def _meta(op, kernel, x, n):
    return checked_meta(op, x, n, kernel=f"{kernel}_cpu", categories="float", reduced=False)


def special_chebyshev_polynomial_t_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_t", "chebyshev_polynomial_t", x, n)


def special_chebyshev_polynomial_t_x_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_t_x_scalar", "chebyshev_polynomial_t", x, n)


def special_chebyshev_polynomial_t_n_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_t_n_scalar", "chebyshev_polynomial_t", x, n)


def special_chebyshev_polynomial_u_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_u", "chebyshev_polynomial_u", x, n)


def special_chebyshev_polynomial_u_x_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_u_x_scalar", "chebyshev_polynomial_u", x, n)


def special_chebyshev_polynomial_u_n_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_u_n_scalar", "chebyshev_polynomial_u", x, n)


def special_chebyshev_polynomial_v_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_v", "chebyshev_polynomial_v", x, n)


def special_chebyshev_polynomial_v_x_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_v_x_scalar", "chebyshev_polynomial_v", x, n)


def special_chebyshev_polynomial_v_n_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_v_n_scalar", "chebyshev_polynomial_v", x, n)


def special_chebyshev_polynomial_w_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_w", "chebyshev_polynomial_w", x, n)


def special_chebyshev_polynomial_w_x_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_w_x_scalar", "chebyshev_polynomial_w", x, n)


def special_chebyshev_polynomial_w_n_scalar_output_shape(x, n):
    return _meta("special_chebyshev_polynomial_w_n_scalar", "chebyshev_polynomial_w", x, n)


def special_shifted_chebyshev_polynomial_t_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_t", x, n)


def special_shifted_chebyshev_polynomial_t_x_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_t_x_scalar", "shifted_chebyshev_polynomial_t", x, n)


def special_shifted_chebyshev_polynomial_t_n_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_t_n_scalar", "shifted_chebyshev_polynomial_t", x, n)


def special_shifted_chebyshev_polynomial_u_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_u", x, n)


def special_shifted_chebyshev_polynomial_u_x_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_u_x_scalar", "shifted_chebyshev_polynomial_u", x, n)


def special_shifted_chebyshev_polynomial_u_n_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_u_n_scalar", "shifted_chebyshev_polynomial_u", x, n)


def special_shifted_chebyshev_polynomial_v_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_v", x, n)


def special_shifted_chebyshev_polynomial_v_x_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_v_x_scalar", "shifted_chebyshev_polynomial_v", x, n)


def special_shifted_chebyshev_polynomial_v_n_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_v_n_scalar", "shifted_chebyshev_polynomial_v", x, n)


def special_shifted_chebyshev_polynomial_w_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_w", "shifted_chebyshev_polynomial_w", x, n)


def special_shifted_chebyshev_polynomial_w_x_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_w_x_scalar", "shifted_chebyshev_polynomial_w", x, n)


def special_shifted_chebyshev_polynomial_w_n_scalar_output_shape(x, n):
    return _meta("special_shifted_chebyshev_polynomial_w_n_scalar", "shifted_chebyshev_polynomial_w", x, n)


def special_hermite_polynomial_h_output_shape(x, n):
    return _meta("special_hermite_polynomial_h", "hermite_polynomial_h", x, n)


def special_hermite_polynomial_h_x_scalar_output_shape(x, n):
    return _meta("special_hermite_polynomial_h_x_scalar", "hermite_polynomial_h", x, n)


def special_hermite_polynomial_h_n_scalar_output_shape(x, n):
    return _meta("special_hermite_polynomial_h_n_scalar", "hermite_polynomial_h", x, n)


def special_hermite_polynomial_he_output_shape(x, n):
    return _meta("special_hermite_polynomial_he", "hermite_polynomial_he", x, n)


def special_hermite_polynomial_he_x_scalar_output_shape(x, n):
    return _meta("special_hermite_polynomial_he_x_scalar", "hermite_polynomial_he", x, n)


def special_hermite_polynomial_he_n_scalar_output_shape(x, n):
    return _meta("special_hermite_polynomial_he_n_scalar", "hermite_polynomial_he", x, n)


def special_laguerre_polynomial_l_output_shape(x, n):
    return _meta("special_laguerre_polynomial_l", "laguerre_polynomial_l", x, n)


def special_laguerre_polynomial_l_x_scalar_output_shape(x, n):
    return _meta("special_laguerre_polynomial_l_x_scalar", "laguerre_polynomial_l", x, n)


def special_laguerre_polynomial_l_n_scalar_output_shape(x, n):
    return _meta("special_laguerre_polynomial_l_n_scalar", "laguerre_polynomial_l", x, n)


def special_legendre_polynomial_p_output_shape(x, n):
    return _meta("special_legendre_polynomial_p", "legendre_polynomial_p", x, n)


def special_legendre_polynomial_p_x_scalar_output_shape(x, n):
    return _meta("special_legendre_polynomial_p_x_scalar", "legendre_polynomial_p", x, n)


def special_legendre_polynomial_p_n_scalar_output_shape(x, n):
    return _meta("special_legendre_polynomial_p_n_scalar", "legendre_polynomial_p", x, n)
