"""Registry names, the registry of an image, and the server config's logins."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from gpudock.config import load_config
from gpudock.core.errors import InvalidInput
from gpudock.core.registries import RegistryLogin, check_registry, registry_of
from gpudock.executors._docker_pull import pull_failure


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("registry.example.com", "registry.example.com"),
        ("Registry.Example.com:5000", "registry.example.com:5000"),
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("localhost", "localhost"),
        ("myhost:443", "myhost:443"),
        ("[::1]:5000", "[::1]:5000"),
        ("index.docker.io", "docker.io"),
        ("registry-1.docker.io", "docker.io"),
    ],
)
def test_a_registry_is_a_host_as_images_name_it(value: str, name: str) -> None:
    assert check_registry(value) == name


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "registry must not be empty"),
        ("https://r.example.com", "must be host[:port], without 'https://'"),
        ("r.example.com/team", "must be host[:port], without a path"),
        ("myregistry", "is not a host[:port] as images name it"),
        ("r.example.com:", "is not a host[:port] as images name it"),
        ("r x.example.com", "is not a host[:port] as images name it"),
        ("a" * 256 + ".com", "at most 255"),
    ],
)
def test_anything_else_is_refused_with_one_line(value: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_registry(value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("ubuntu", "docker.io"),
        ("library/ubuntu:24.04", "docker.io"),
        ("team/model", "docker.io"),  # a first component without a dot or port is a path
        ("registry.example.com/team/model:1", "registry.example.com"),
        ("127.0.0.1:5000/gpudock-test/busybox:latest", "127.0.0.1:5000"),
        ("localhost/x", "localhost"),
        ("Index.Docker.io/library/ubuntu", "docker.io"),
        ("r.example.com/x@sha256:" + "a" * 64, "r.example.com"),
    ],
)
def test_the_registry_of_an_image_follows_dockers_rule(image: str, registry: str) -> None:
    assert registry_of(image) == registry


def test_a_login_never_shows_its_password() -> None:
    login = RegistryLogin("r.example.com", "ci", "user alice", SecretStr("hunter2-pw"))

    assert "hunter2-pw" not in repr(login) + str(login)
    assert login.auth_config() == {
        "username": "ci",
        "password": "hunter2-pw",
        "serveraddress": "r.example.com",
    }


def write_config(tmp_path: Path, password_file: Path, registry: str = "r.example.com") -> Path:
    path = tmp_path / "server.yaml"
    path.write_text(
        f"executor:\n  registries:\n    {registry}:\n"
        f"      username: puller\n      password_file: {password_file}\n"
    )
    return path


def test_a_config_login_reads_its_password_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-the-file\n")

    config = load_config(write_config(tmp_path, secret, "R.Example.com:5000"))
    login = config.executor.registries["r.example.com:5000"].login("r.example.com:5000")

    assert login.password.get_secret_value() == "from-the-file"
    assert login.owner == "the server config"
    assert "from-the-file" not in repr(config) + config.model_dump_json()


def test_an_unreadable_or_empty_password_file_refuses_the_config(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"cannot read password_file .*missing"):
        load_config(write_config(tmp_path, tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidInput, match=r"password_file .*empty is empty"):
        load_config(write_config(tmp_path, empty))


def test_an_inline_password_or_a_bad_registry_refuses_the_config(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text("executor:\n  registries:\n    r.example.com: {username: u, password: p}\n")
    with pytest.raises(InvalidInput, match=r"registries\.r\.example\.com\.password: unknown field"):
        load_config(path)
    secret = tmp_path / "pw"
    secret.write_text("p")
    with pytest.raises(InvalidInput, match="registry 'https://r' must be host"):
        load_config(write_config(tmp_path, secret, "https://r"))


IMAGE = "127.0.0.1:5000/team/model:1"


def test_a_pull_refused_without_a_login_says_which_registry_and_what_to_run() -> None:
    reason = pull_failure(
        IMAGE, 'Head "http://127.0.0.1:5000/v2/": no basic auth credentials', None
    )

    assert reason == (
        f"image {IMAGE!r} is not present and could not be pulled: registry 127.0.0.1:5000 "
        "refused a pull without a login (no basic auth credentials); "
        "store one with: gpudock registry login 127.0.0.1:5000"
    )


def test_a_pull_refused_with_a_login_says_whose_and_never_the_password() -> None:
    login = RegistryLogin("127.0.0.1:5000", "ci", "user alice", SecretStr("pw-XYZ"))

    reason = pull_failure(IMAGE, "unauthorized: authentication required pw-XYZ", login, True)

    assert reason.startswith(f"image {IMAGE!r} could not be pulled: registry 127.0.0.1:5000 ")
    assert "refused the login of user alice (username 'ci')" in reason
    assert "pw-XYZ" not in reason


def test_other_pull_failures_keep_their_reason() -> None:
    reason = pull_failure(IMAGE, "manifest for x not found: manifest unknown", None)

    assert reason.endswith("could not be pulled: manifest for x not found: manifest unknown")
