"""The device behaves like any PyTorch device: identity, views, in-place, out=, indexing."""

from __future__ import annotations

import copy
import io

import pytest
import torch

DEVICE = "spyre"


def test_identity_and_round_trip(host: torch.Tensor) -> None:
    on_device = host.to(DEVICE)
    assert type(on_device) is torch.Tensor
    assert on_device.device == torch.device("spyre", 0)
    assert on_device.device.type == "spyre"
    assert on_device.is_spyre
    assert torch.equal(on_device.cpu(), host)
    assert torch.equal(host.spyre().cpu(), host)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.bool,
        torch.uint8,
    ],
)
def test_round_trip_dtypes(dtype: torch.dtype) -> None:
    values = (torch.arange(12).reshape(3, 4) % 5).to(dtype)
    assert torch.equal(values.to(DEVICE).cpu(), values)


def test_arithmetic_matches_cpu(host: torch.Tensor) -> None:
    x = host.to(DEVICE)
    result = (x * 2 + 1 - x / 3).exp().sum(dim=1)
    expected = (host * 2 + 1 - host / 3).exp().sum(dim=1)
    assert result.device.type == DEVICE
    torch.testing.assert_close(result.cpu(), expected)


def test_views_share_storage(host: torch.Tensor) -> None:
    x = host.to(DEVICE)
    for view, expected in [
        (x.view(6, 4), host.view(6, 4)),
        (x.t(), host.t()),
        (x[1:3, ::2], host[1:3, ::2]),
        (x.unsqueeze(0).expand(2, 4, 6), host.unsqueeze(0).expand(2, 4, 6)),
        (x.as_strided((2, 2), (1, 6), 1), host.as_strided((2, 2), (1, 6), 1)),
    ]:
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert torch.equal(view.cpu(), expected)
    x.view(-1)[0] = 42.0
    assert x[0, 0].item() == 42.0


def test_in_place_and_out(host: torch.Tensor) -> None:
    x = host.to(DEVICE)
    pointer = x.data_ptr()
    x.add_(1).mul_(2)
    assert x.data_ptr() == pointer
    torch.testing.assert_close(x.cpu(), (host + 1) * 2)
    out = torch.empty(4, 6, device=DEVICE)
    returned = torch.add(x, x, out=out)
    assert returned is out
    torch.testing.assert_close(out.cpu(), 2 * (host + 1) * 2)
    resized = torch.empty(0, device=DEVICE)
    torch.mul(x, 3, out=resized)
    assert resized.shape == (4, 6)
    torch.testing.assert_close(resized.cpu(), 3 * (host + 1) * 2)


def test_indexing(host: torch.Tensor) -> None:
    x = host.to(DEVICE)
    index = torch.tensor([0, 2])
    assert torch.equal(x[index.to(DEVICE)].cpu(), host[index])
    assert torch.equal(x[x > 0].cpu(), host[host > 0])
    y = x.clone()
    y[index.to(DEVICE)] = 0.0
    expected = host.clone()
    expected[index] = 0.0
    assert torch.equal(y.cpu(), expected)
    y.masked_fill_(y < 0, 7.0)
    assert torch.equal(y.cpu(), expected.masked_fill(expected < 0, 7.0))


def test_factories_on_device() -> None:
    assert torch.equal(torch.arange(5, device=DEVICE).cpu(), torch.arange(5))
    assert torch.equal(torch.zeros(2, 3, device=DEVICE).cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.full((2,), 3.5, device=DEVICE).cpu(), torch.full((2,), 3.5))
    assert torch.randn(3, 3, device=DEVICE).device.type == DEVICE


def test_autograd(host: torch.Tensor) -> None:
    x = host.to(DEVICE).requires_grad_()
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.device.type == DEVICE
    torch.testing.assert_close(x.grad.cpu(), 2 * host)


def test_module_and_optimizer_step(host: torch.Tensor, permissive: None) -> None:
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model = copy.deepcopy(reference).to(DEVICE)
    for net, data in ((reference, host), (model, host.to(DEVICE))):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        loss = torch.nn.functional.mse_loss(net(data), torch.ones(4, 2, device=data.device))
        loss.backward()
        optimizer.step()
    for expected, actual in zip(reference.parameters(), model.parameters(), strict=True):
        assert actual.device.type == DEVICE
        torch.testing.assert_close(actual.detach().cpu(), expected.detach())


def test_save_load_and_deepcopy(host: torch.Tensor) -> None:
    x = host.to(DEVICE)
    buffer = io.BytesIO()
    torch.save({"x": x}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)["x"]
    assert loaded.device.type == DEVICE
    assert torch.equal(loaded.cpu(), host)
    buffer.seek(0)
    assert torch.load(buffer, map_location="cpu")["x"].device.type == "cpu"
    copied = copy.deepcopy(x)
    assert copied.device.type == DEVICE and copied.data_ptr() != x.data_ptr()
    assert torch.equal(copied.cpu(), host)


def test_printing_shows_device(host: torch.Tensor) -> None:
    text = repr(host.to(DEVICE))
    assert "device='spyre:0'" in text
    assert text.split("device=")[0].replace(" ", "").replace("\n", "").rstrip(",") == repr(
        host
    ).replace(" ", "").replace("\n", "").rstrip(")")


def test_untyped_storage_on_device() -> None:
    storage = torch.UntypedStorage(10, device=DEVICE)
    assert storage.device.type == DEVICE
    assert storage.nbytes() == 10
    assert torch.UntypedStorage(device=DEVICE).nbytes() == 0
    filled = torch.UntypedStorage([1, 2, 3], device=DEVICE)
    assert list(filled.cpu()) == [1, 2, 3]


def test_convolution_and_layer_norm(permissive: None) -> None:
    torch.manual_seed(0)
    image, weight = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    conv = torch.nn.functional.conv2d(image.to(DEVICE), weight.to(DEVICE), padding=1)
    torch.testing.assert_close(conv.cpu(), torch.nn.functional.conv2d(image, weight, padding=1))
    norm = torch.nn.functional.layer_norm(image.to(DEVICE), (8,))
    torch.testing.assert_close(norm.cpu(), torch.nn.functional.layer_norm(image, (8,)))


def test_out_tensor_that_must_grow(host: torch.Tensor) -> None:
    x = host.to(DEVICE)
    small = torch.empty(2, device=DEVICE)
    before = small.untyped_storage().nbytes()
    torch.add(x, 1, out=small)
    assert small.shape == (4, 6) and small.untyped_storage().nbytes() > before
    torch.testing.assert_close(small.cpu(), host + 1)


def test_resize_grows_a_tensor_whose_owner_holds_whole_sticks(host: torch.Tensor) -> None:
    x = host.to(DEVICE)  # 96 bytes on the device, 128 (one stick) in the owner
    x.resize_(5, 6)
    assert x.untyped_storage().nbytes() == 5 * 6 * 4
    torch.testing.assert_close(x[:4].cpu(), host)


def test_python_numbers_where_the_overload_wants_a_tensor() -> None:
    values = torch.tensor([5.5, -3.0, 1.25], dtype=torch.bfloat16)
    on_device = values.to(DEVICE)
    for result, expected in [
        (torch.remainder(on_device, 2.5), torch.remainder(values, 2.5)),
        (5.75 % on_device, 5.75 % values),
        (torch.xlogy(on_device.abs(), 4.125), torch.xlogy(values.abs(), 4.125)),
    ]:
        assert result.dtype == expected.dtype == torch.bfloat16
        assert torch.equal(result.cpu(), expected)


def test_lazily_conjugated_copies(permissive: None) -> None:
    values = torch.randn(3, dtype=torch.complex64)
    on_device = values.to(DEVICE)
    assert torch.equal(on_device.conj().clone().cpu(), values.conj())
    target = torch.empty(3, dtype=torch.complex64, device=DEVICE)
    target.copy_(on_device.conj())
    assert torch.equal(target.cpu(), values.conj())
