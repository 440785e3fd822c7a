"""Noise-level schedules diffusers' schedulers share: Karras, exponential, flow-matching shifts.

All in float64 as diffusers computes them in numpy; callers round to float32 where
diffusers does.
"""

from __future__ import annotations

import math

import numpy as np


def _bounds(in_sigmas: np.ndarray, config: dict) -> tuple[float, float]:
    """``sigma_min``/``sigma_max`` from the config when it sets them, else ``in_sigmas``' ends."""
    low, high = config.get("sigma_min"), config.get("sigma_max")
    low = low if low is not None else float(in_sigmas[-1])
    high = high if high is not None else float(in_sigmas[0])
    return low, high


def karras_sigmas(in_sigmas: np.ndarray, steps: int, config: dict, rho: float = 7.0) -> np.ndarray:
    """Karras et al. (2022) noise levels between the ends of ``in_sigmas`` (descending)."""
    sigma_min, sigma_max = _bounds(in_sigmas, config)
    ramp = np.linspace(0, 1, steps)
    min_inv_rho, max_inv_rho = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho


def exponential_sigmas(in_sigmas: np.ndarray, steps: int, config: dict) -> np.ndarray:
    """Noise levels evenly spaced in log between the ends of ``in_sigmas`` (descending)."""
    sigma_min, sigma_max = _bounds(in_sigmas, config)
    return np.exp(np.linspace(math.log(sigma_max), math.log(sigma_min), steps))


def sigma_to_t(sigma, log_sigmas: np.ndarray) -> np.ndarray:
    """The fractional training timestep of ``sigma``: linear interpolation in log sigma."""
    log_sigma = np.log(np.maximum(sigma, 1e-10))
    dists = log_sigma - log_sigmas[:, np.newaxis]
    low_idx = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=log_sigmas.shape[0] - 2)
    high_idx = low_idx + 1
    low, high = log_sigmas[low_idx], log_sigmas[high_idx]
    w = np.clip((low - log_sigma) / (low - high), 0, 1)
    return ((1 - w) * low_idx + w * high_idx).reshape(np.shape(sigma))


def sigmas_to_t(sigmas: np.ndarray, log_sigmas: np.ndarray) -> np.ndarray:
    """:func:`sigma_to_t` of each sigma, as diffusers maps them one by one."""
    return np.array([sigma_to_t(sigma, log_sigmas) for sigma in sigmas])


def time_shift(kind: str, mu: float, sigmas: np.ndarray) -> np.ndarray:
    """Resolution-dependent shift of flow-matching sigmas (``time_shift_type`` ``kind``)."""
    if kind == "exponential":
        return math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1) ** 1.0)
    return mu / (mu + (1 / sigmas - 1) ** 1.0)


def shift(value: float, sigmas: np.ndarray) -> np.ndarray:
    """The static flow-matching shift ``s * sigma / (1 + (s - 1) * sigma)``."""
    return value * sigmas / (1 + (value - 1) * sigmas)


def stretch_to_terminal(sigmas: np.ndarray, terminal: float) -> np.ndarray:
    """Rescale ``1 - sigmas`` so the last sigma becomes ``terminal`` (``shift_terminal``)."""
    one_minus = 1 - sigmas
    scale = one_minus[-1] / (1 - terminal)
    return 1 - (one_minus / scale)


def shifted_flow_sigmas(config: dict, sigmas: np.ndarray, mu: float | None, value: float):
    """Flow-matching sigmas shifted as a config says: dynamically by ``mu`` when
    ``use_dynamic_shifting``, else by ``value``; then stretched to ``shift_terminal``."""
    if config["use_dynamic_shifting"]:
        sigmas = time_shift(config["time_shift_type"], mu, sigmas)
    else:
        sigmas = shift(value, sigmas)
    if config["shift_terminal"]:
        sigmas = stretch_to_terminal(sigmas, config["shift_terminal"])
    return sigmas
