"""The shared diffusion blocks against diffusers' own: attention, feed-forward, timestep embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers.models.attention import FeedForward as TorchFeedForward
from diffusers.models.attention_processor import Attention as TorchAttention
from diffusers.models.embeddings import TimestepEmbedding as TorchTimestepEmbedding
from diffusers.models.embeddings import Timesteps as TorchTimesteps

from mobius.testing import perturb_parameters, run_module
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps


def _params(module) -> dict[str, np.ndarray]:
    """A torch module's perturbed weights by name (Linear weights transposed as mobius stores them)."""
    perturb_parameters(module, seed=1, scale=0.2)
    return {
        name: (
            p.detach().numpy().T if name.endswith("weight") and p.ndim == 2 else p.detach().numpy()
        )
        for name, p in module.state_dict().items()
    }


@pytest.mark.parametrize("cross", [False, True])
def test_attention(cross):
    torch.manual_seed(0)
    reference = TorchAttention(
        16, cross_attention_dim=12 if cross else None, heads=2, dim_head=8, bias=True
    ).eval()
    params = _params(reference)
    hidden = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    context = np.random.default_rng(1).standard_normal((2, 7, 12)).astype(np.float32)
    ours = Attention(16, heads=2, dim_head=8, cross_attention_dim=12 if cross else None, bias=True)
    inputs = {"hidden": hidden, **({"context": context} if cross else {})}
    (got,) = run_module(lambda op, *xs: ours(op, *xs), inputs, params)
    with torch.no_grad():
        expected = reference(torch.from_numpy(hidden), torch.from_numpy(context) if cross else None)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("activation", FeedForward.ACTIVATIONS)
def test_feed_forward(activation):
    torch.manual_seed(0)
    reference = TorchFeedForward(16, mult=2, activation_fn=activation).eval()
    params = _params(reference)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    (got,) = run_module(
        lambda op, x: FeedForward(16, mult=2, activation_fn=activation)(op, x), {"x": x}, params
    )
    with torch.no_grad():
        np.testing.assert_allclose(got, reference(torch.from_numpy(x)).numpy(), atol=1e-5)


@pytest.mark.parametrize("flip, shift, dim", [(True, 0, 32), (False, 1, 33)])
def test_timestep_embedding(flip, shift, dim):
    timesteps = np.array([0.0, 17.5, 999.0], np.float32)
    like = np.zeros((1,), np.float32)
    reference = TorchTimestepEmbedding(dim, 24)
    params = _params(reference)
    embed = TimestepEmbedding(dim, 24)

    def forward(op, t, like):
        return embed(op, Timesteps(dim, flip, shift)(op, t, like))

    (got,) = run_module(forward, {"t": timesteps, "like": like}, params)
    with torch.no_grad():
        expected = reference(TorchTimesteps(dim, flip, shift)(torch.from_numpy(timesteps)))
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-4)
