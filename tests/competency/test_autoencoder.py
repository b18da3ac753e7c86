"""CompetencyAutoencoder: shapes for several image sizes, learning on a tiny set, bad input."""

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402

from nemo_train.competency.autoencoder import CompetencyAutoencoder  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402


@pytest.mark.parametrize("size", [28, 32, 64])
def test_shapes_and_range(size):
    ae = CompetencyAutoencoder(image_size=size, widths=(4, 8), latent_dim=6)
    x = torch.rand(2, 3, size, size)
    assert ae.encode(x).shape == (2, 6)
    out = ae(x)
    assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    assert ae.reconstruction_loss(x).shape == (2,)


def test_loss_is_mse_of_the_linear_decoder_output():
    ae = CompetencyAutoencoder(image_size=8, widths=(4,), latent_dim=3)
    x = torch.rand(3, 3, 8, 8)
    expected = ((ae.decode_linear(ae.encode(x)) - x) ** 2).mean((1, 2, 3))
    assert torch.allclose(ae.reconstruction_loss(x), expected)


def test_training_lowers_the_reconstruction_error_of_sparse_images():
    torch.manual_seed(0)
    x = torch.zeros(32, 3, 8, 8)
    for i in range(32):  # one bright square per image, CMNIST-like sparsity
        r, c = i % 5, (i // 5) % 5
        x[i, i % 3, r : r + 3, c : c + 3] = 1.0
    ae = CompetencyAutoencoder(image_size=8, widths=(8,), latent_dim=16, lr=1e-2)
    opt = ae.configure_optimizers()
    blank = (x**2).mean()  # error of an all-black reconstruction
    for _ in range(150):
        loss = ae.reconstruction_loss(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert ae.reconstruction_loss(x).mean() < 0.5 * blank


def test_reset_parameters_follows_the_seed():
    first = CompetencyAutoencoder(image_size=16, widths=(4, 8), latent_dim=6)
    second = CompetencyAutoencoder(image_size=16, widths=(4, 8), latent_dim=6)
    assert not torch.equal(first.to_latent.weight, second.to_latent.weight)  # built from different random states
    for model in (first, second):
        torch.manual_seed(3)
        model.reset_parameters()
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), name
    assert first.to_latent.weight.std() > 0


def test_bad_input_and_settings():
    ae = CompetencyAutoencoder(image_size=8, widths=(4,), latent_dim=3)
    with pytest.raises(UserInputError, match=r"\[B, 3, 8, 8\]"):
        ae(torch.rand(1, 3, 9, 9))
    with pytest.raises(UserInputError, match=r"\[B, 3, 8, 8\]"):
        ae.encode(torch.rand(3, 8, 8))
    with pytest.raises(UserInputError, match="latent_dim"):
        CompetencyAutoencoder(latent_dim=0)
    with pytest.raises(UserInputError, match="too small"):
        CompetencyAutoencoder(image_size=2)
