"""The kernel image's build logic: inputs hash, pins, apt mirror, build context, status.

The pure parts run everywhere. The tests marked ``docker`` inspect the real image and run it
once (no network, non-root); they need an engine and ``interp images build``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import docker
import pytest

from interpreter import image as images
from interpreter.image import (
    DEFAULT_BASE_IMAGE,
    DEFAULT_IMAGE,
    KERNEL_UID,
    AptSource,
    ImageBuildError,
    ImageStatus,
    build,
    cache_dir,
    debian_mirror,
    inputs_hash,
    missing_image_message,
    parse_deb822_sources,
    parse_sources_list,
    read_pins,
    stage_context,
    wheel_platforms,
)
from tests.conftest import require_docker

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = REPO / "images" / "python"


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    """A minimal checkout: the image directory and a kernel package."""
    root = tmp_path / "checkout"
    source = root / "images" / "python"
    source.mkdir(parents=True)
    (source / "Dockerfile").write_text("FROM scratch\n")
    (source / "requirements.txt").write_text("numpy==2.0.0\n")
    package = root / "kernels" / "interpreter_kernel"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "mod.py").write_text("X = 1\n")
    return root


# --------------------------------------------------------------------------------------------
# Inputs hash


def test_inputs_hash_is_stable(fake_root: Path) -> None:
    assert inputs_hash(fake_root) == inputs_hash(fake_root)
    assert len(inputs_hash(fake_root)) == 64


@pytest.mark.parametrize(
    "relative",
    [
        "images/python/Dockerfile",
        "images/python/requirements.txt",
        "kernels/interpreter_kernel/sub/mod.py",
    ],
)
def test_inputs_hash_changes_when_an_input_changes(fake_root: Path, relative: str) -> None:
    before = inputs_hash(fake_root)
    path = fake_root / relative
    path.write_text(path.read_text() + "# changed\n")
    assert inputs_hash(fake_root) != before


def test_inputs_hash_sees_new_and_renamed_files(fake_root: Path) -> None:
    package = fake_root / "kernels" / "interpreter_kernel"
    before = inputs_hash(fake_root)
    (package / "extra.py").write_text("")
    with_extra = inputs_hash(fake_root)
    assert with_extra != before
    (package / "extra.py").rename(package / "other.py")
    assert inputs_hash(fake_root) not in {before, with_extra}


def test_inputs_hash_ignores_bytecode_and_dotfiles(fake_root: Path) -> None:
    before = inputs_hash(fake_root)
    package = fake_root / "kernels" / "interpreter_kernel"
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0" * 16)
    (package / ".DS_Store").write_bytes(b"x")
    (fake_root / "images" / "python" / "Dockerfile~").write_text("backup")
    assert inputs_hash(fake_root) == before


def test_inputs_hash_depends_on_the_machine_type(fake_root: Path) -> None:
    assert inputs_hash(fake_root, machine="x86_64") != inputs_hash(fake_root, machine="aarch64")


def test_checkout_has_build_inputs() -> None:
    names = [name for name, _ in images.build_input_files()]
    assert "images/python/Dockerfile" in names
    assert "images/python/requirements.txt" in names
    assert "images/python/write_versions.py" in names
    assert all(not name.endswith(".pyc") for name in names)


# --------------------------------------------------------------------------------------------
# Pins and the Dockerfile


def test_requirements_are_exact_pins_of_what_the_kernel_needs() -> None:
    pins = read_pins(IMAGE_DIR / "requirements.txt")
    for name in ("ipykernel", "pandas", "matplotlib", "numpy", "pyzmq"):
        assert name in pins, name
    # The closure is pinned too (pip installs with --no-deps).
    for name in ("jupyter-client", "tornado", "traitlets", "ipython", "pillow"):
        assert name in pins, name
    # Nothing that only installs packages.
    assert not {"pip", "setuptools", "wheel"} & set(pins)


@pytest.mark.parametrize(
    "line", ["pandas>=2.0", "pandas", "pandas==2.*", "-e .", "pandas==2.0 ; python_version<'4'"]
)
def test_read_pins_rejects_anything_but_exact_pins(tmp_path: Path, line: str) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(f"numpy==2.0.0\n{line}\n")
    with pytest.raises(ValueError, match="not an exact pin"):
        read_pins(path)


def test_read_pins_normalizes_names_and_skips_comments(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("# header\n\nTyping_Extensions==4.0  # trailing\nzope.interface==6.1\n")
    assert read_pins(path) == {"typing-extensions": "4.0", "zope-interface": "6.1"}


def test_read_pins_rejects_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("numpy==1.0\nNumPy==2.0\n")
    with pytest.raises(ValueError, match="pinned twice"):
        read_pins(path)


def test_dockerfile_agrees_with_the_library() -> None:
    text = (IMAGE_DIR / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={DEFAULT_BASE_IMAGE}\n" in text
    assert f"ARG KERNEL_UID={KERNEL_UID}\n" in text
    assert f"python{images.PYTHON_VERSION}/site-packages/interpreter_kernel" in text
    assert "WORKDIR /workspace" in text
    assert "--no-index" in text
    assert "-perm /6000" in text


def test_image_user_is_the_user_the_docker_backend_runs() -> None:
    from interpreter.backends.docker import config as docker_config

    assert (images.KERNEL_UID, images.KERNEL_GID) == (
        docker_config.KERNEL_UID,
        docker_config.KERNEL_GID,
    )
    assert KERNEL_UID != 0


def test_wheel_platforms_cover_older_glibc_and_reject_unknown_machines() -> None:
    tags = wheel_platforms("x86_64")
    assert tags[0] == f"manylinux_2_{images.GLIBC_MINOR}_x86_64"
    assert {"manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"} <= set(tags)
    assert all(tag.endswith("_x86_64") for tag in tags)
    assert wheel_platforms("arm64")[0].endswith("_aarch64")
    with pytest.raises(ImageBuildError):
        wheel_platforms("riscv64")


# --------------------------------------------------------------------------------------------
# Debian mirror from the apt configuration

DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
Enabled: no
URIs: http://off.example/debian
Suites: bookworm
"""


def test_parse_deb822_keeps_enabled_binary_stanzas() -> None:
    sources = parse_deb822_sources(DEB822)
    assert [s.uri for s in sources] == [
        "http://mirror.example/debian",
        "http://mirror.example/debian-security",
    ]
    assert sources[0].suites == ("bookworm", "bookworm-updates")
    assert sources[0].components == ("main",)
    assert sources[0].keyring == Path("/usr/share/keyrings/debian-archive-keyring.gpg")
    assert sources[1].keyring is None


def test_parse_deb822_multiple_uris_and_inline_key() -> None:
    text = (
        "Types: deb deb-src\nURIs: http://a.example/debian http://b.example/debian\n"
        "Suites: bookworm\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n"
    )
    sources = parse_deb822_sources(text)
    assert [s.uri for s in sources] == ["http://a.example/debian", "http://b.example/debian"]
    assert all(s.keyring is None for s in sources)


def test_parse_sources_list_one_line_format() -> None:
    text = """\
# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/etc/apt/keyrings/k.gpg] http://mirror.example/debian bookworm main c2
deb http://mirror.example/debian-security bookworm-security main # trailing
"""
    sources = parse_sources_list(text)
    assert sources == [
        AptSource(
            uri="http://mirror.example/debian",
            suites=("bookworm",),
            components=("main", "c2"),
            keyring=Path("/etc/apt/keyrings/k.gpg"),
        ),
        AptSource(
            uri="http://mirror.example/debian-security",
            suites=("bookworm-security",),
            components=("main",),
        ),
    ]


def _apt_dir(tmp_path: Path, *, sources: str = "", listing: str = "") -> Path:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    if sources:
        (apt / "sources.list.d" / "debian.sources").write_text(sources)
    if listing:
        (apt / "sources.list").write_text(listing)
    return apt


def test_debian_mirror_picks_the_main_suite_not_security(tmp_path: Path) -> None:
    security_first = DEB822.split("\n\n")[1] + "\n\n" + DEB822.split("\n\n")[0] + "\n"
    apt = _apt_dir(tmp_path, sources=security_first)
    source = debian_mirror("bookworm", apt_dir=apt, environ={})
    assert source.uri == "http://mirror.example/debian"


def test_debian_mirror_falls_back_to_sources_list(tmp_path: Path) -> None:
    apt = _apt_dir(tmp_path, listing="deb http://old.example/debian bookworm main\n")
    assert debian_mirror("bookworm", apt_dir=apt, environ={}).uri == "http://old.example/debian"


def test_debian_mirror_env_override_wins(tmp_path: Path) -> None:
    apt = _apt_dir(tmp_path, sources=DEB822)
    environ = {images.ENV_DEBIAN_MIRROR: "http://override.example/debian"}
    assert debian_mirror("bookworm", apt_dir=apt, environ=environ).uri == (
        "http://override.example/debian"
    )


def test_debian_mirror_without_a_source_is_a_clear_error(tmp_path: Path) -> None:
    apt = _apt_dir(tmp_path, listing="deb http://old.example/debian bullseye main\n")
    with pytest.raises(ImageBuildError, match=images.ENV_DEBIAN_MIRROR):
        debian_mirror("bookworm", apt_dir=apt, environ={})


def test_debian_mirror_ignores_a_keyring_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gpg"
    stanza = f"Types: deb\nURIs: http://m.example/debian\nSuites: bookworm\nSigned-By: {missing}"
    apt = _apt_dir(tmp_path, sources=stanza)
    source = debian_mirror("bookworm", apt_dir=apt, environ={})
    assert source.uri == "http://m.example/debian"
    assert source.keyring != missing


# --------------------------------------------------------------------------------------------
# Cache, build context, messages


def test_cache_dir_precedence(tmp_path: Path) -> None:
    assert cache_dir({images.ENV_CACHE_DIR: str(tmp_path / "c")}) == tmp_path / "c"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "interp"
    assert cache_dir({}) == Path.home() / ".cache" / "interp"


def test_stage_context_holds_only_inputs_and_wheels(fake_root: Path, tmp_path: Path) -> None:
    package = fake_root / "kernels" / "interpreter_kernel"
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.pyc").write_bytes(b"")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"wheel")
    (wheels / ".complete").write_text("{}")
    context = tmp_path / "context"
    context.mkdir()
    stage_context(context, wheels, fake_root)
    staged = sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
    assert staged == [
        "Dockerfile",
        "interpreter_kernel/__init__.py",
        "interpreter_kernel/sub/mod.py",
        "requirements.txt",
        "wheelhouse/numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.whl",
    ]


def test_missing_image_message_names_the_command() -> None:
    assert "interp images build" in missing_image_message(DEFAULT_IMAGE)
    assert "--image" not in missing_image_message(DEFAULT_IMAGE)
    assert "interp images build --image k:v2" in missing_image_message("k:v2")


def test_status_problem() -> None:
    assert ImageStatus(image="k:1", exists=True, up_to_date=True).problem() is None
    missing = ImageStatus(image="k:1", exists=False, up_to_date=False).problem()
    assert missing is not None and "interp images build --image k:1" in missing
    stale = ImageStatus(image=DEFAULT_IMAGE, exists=True, up_to_date=False).problem()
    assert stale is not None and "Rebuild" in stale


# --------------------------------------------------------------------------------------------
# write_versions.py (runs inside the image build; here with this interpreter)


def _write_versions(tmp_path: Path, pins: dict[str, str]) -> subprocess.CompletedProcess[str]:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    return subprocess.run(
        [sys.executable, str(IMAGE_DIR / "write_versions.py"), str(requirements),
         str(tmp_path / "out" / "versions.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_write_versions_records_exactly_what_is_installed(tmp_path: Path) -> None:
    installed = {dist.metadata["Name"]: dist.version for dist in metadata.distributions()}
    result = _write_versions(tmp_path, installed)
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "out" / "versions.json").read_text())
    assert record["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["packages"] == {images.normalize_name(k): v for k, v in installed.items()}


def test_write_versions_refuses_a_mismatch(tmp_path: Path) -> None:
    installed = {dist.metadata["Name"]: dist.version for dist in metadata.distributions()}
    installed["surely-not-installed-pkg"] = "1.0"
    result = _write_versions(tmp_path, installed)
    assert result.returncode == 1
    assert "surely-not-installed-pkg" in result.stderr
    assert not (tmp_path / "out" / "versions.json").exists()


# --------------------------------------------------------------------------------------------
# The real image


@pytest.mark.docker
def test_image_status_of_the_built_image() -> None:
    require_docker()
    status = images.image_status(DEFAULT_IMAGE)
    assert status.exists and status.image_id and status.image_id.startswith("sha256:")
    assert status.expected_hash == inputs_hash()
    if not status.up_to_date:
        # CI builds the image right before the tests, so there it must be current.
        why = "kernel image is older than this checkout: run `interp images build`"
        if os.environ.get("INTERP_REQUIRE_DOCKER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    assert status.problem() is None
    assert status.packages == read_pins(IMAGE_DIR / "requirements.txt")
    assert status.base_image


@pytest.mark.docker
def test_image_status_of_a_missing_image() -> None:
    require_docker()
    status = images.image_status("interp-kernel:no-such-tag-for-tests")
    assert not status.exists and not status.up_to_date and status.image_id is None
    assert status.problem() == missing_image_message("interp-kernel:no-such-tag-for-tests")


@pytest.mark.docker
def test_image_runs_offline_as_non_root_without_setuid_files() -> None:
    require_docker()
    probe = (
        "import json, os, subprocess, sys\n"
        "import ipykernel, matplotlib, numpy, pandas, zmq, interpreter_kernel\n"
        "found = subprocess.run(['find', '/', '-xdev', '-perm', '/6000', '-type', 'f'],"
        " capture_output=True, text=True).stdout.split()\n"
        "with open('/etc/interp/versions.json') as f: versions = json.load(f)\n"
        "print(json.dumps({'uid': os.getuid(), 'cwd': os.getcwd(), 'setuid': found,"
        " 'exe': sys.executable, 'packages': versions['packages']}))\n"
    )
    client = docker.from_env()
    try:
        out = client.containers.run(
            DEFAULT_IMAGE,
            ["python", "-c", probe],
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": "size=64m"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            environment={"HOME": "/tmp"},
            remove=True,
        )
    finally:
        client.close()
    report = json.loads(out)
    assert report["uid"] == KERNEL_UID
    assert report["cwd"] == "/workspace"
    assert report["exe"].startswith("/opt/kernel/")
    # As a non-root user find cannot read every directory; the build checks as root too.
    assert report["setuid"] == []
    labels = images.image_status(DEFAULT_IMAGE).packages
    assert report["packages"] == labels


def _tiny_image(client: docker.DockerClient, tmp_path: Path, tag: str | None) -> str:
    """An image of one label FROM scratch (builds offline in a moment); its id."""
    (tmp_path / "Dockerfile").write_text(f"FROM scratch\nLABEL interp.test={tmp_path.name}\n")
    image, _ = client.images.build(path=str(tmp_path), tag=tag, rm=True)
    image_id: str = image.id
    return image_id


@pytest.mark.docker
def test_a_rebuild_drops_the_previous_build_but_not_a_tag_the_user_kept(tmp_path: Path) -> None:
    """After a build the previous image, untagged, is removed. The engine removes an image
    by id with all its tags of one repository, so a tag the user had put on it
    (``interp-kernel:v1``, to go back to) went with it."""
    require_docker()
    repo = f"interp-test-rebuild-{os.getpid()}"
    client = docker.from_env()
    try:
        (tmp_path / "kept").mkdir()
        (tmp_path / "dangling").mkdir()
        kept = _tiny_image(client, tmp_path / "kept", f"{repo}:v1")
        dangling = _tiny_image(client, tmp_path / "dangling", None)
        build._remove_quietly(client, kept)
        build._remove_quietly(client, dangling)
        assert client.images.get(kept).tags == [f"{repo}:v1"]
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(dangling)
    finally:
        for image in client.images.list(name=repo):
            client.images.remove(image.id, force=True)
        client.close()
