"""A careless or hostile client: path tricks on the files API, another key guessing ids."""

from __future__ import annotations

import secrets

import pytest

from tests.adversarial.conftest import Attack, Broker
from tests.conftest import OTHER_KEY

TRICKS = [
    "../state.db",
    "..%2Fstate.db",
    "%2e%2e/%2e%2e/state.db",
    "a/../../state.db",
    "%2Fetc%2Fpasswd",
    "a%5C..%5Cb",
    "a%00b",
    "a/%2E/x",
    "a//b",
    "%E2%80%A4%E2%80%A4/state.db",  # one-dot leaders: NFKC makes them '..'
    "x" * 300,
]


def test_path_tricks_are_refused_with_a_reason(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    base = f"/v1/sessions/{sid}/files"
    for trick in TRICKS:
        for method in ("GET", "PUT", "DELETE"):
            resp = attack.api.request(method, f"{base}/{trick}", content=b"x")
            assert resp.status_code in (400, 404), (method, trick, resp.status_code)
            assert resp.json()["error"]["message"], (method, trick)
    listing = attack.api.get(base, params={"path": "../.."})
    assert listing.status_code == 400
    assert "'..'" in listing.json()["error"]["message"]
    # Nothing was written anywhere by the attempts.
    assert attack.api.get(base).json()["entries"] == []


def test_links_and_special_files_planted_by_the_kernel_are_not_followed(
    adv: Broker, attack: Attack
) -> None:
    victim = attack.session()
    attack.run(victim, "open('victim.txt', 'w').write('victim')")
    sid = attack.session()
    runtime = "/run/interp/kernel.json" if adv.backend == "docker" else "/etc/hostname"
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', 'passwd')\n"
        f"os.symlink({runtime!r}, 'conn')\n"
        "os.symlink('/', 'root')\n"
        "os.mkfifo('fifo')\n"
        "open('plain.txt', 'w').write('plain')\n"
        "try:\n    os.link('/etc/passwd', 'hard')\n    hard = 'linked'\n"
        "except OSError as e:\n    hard = type(e).__name__\n"
        "hard"
    )
    assert attack.text(sid, code) != "'linked'" or adv.backend == "local"
    base = f"/v1/sessions/{sid}/files"
    for name in ("passwd", "conn", "root/etc/passwd", "fifo"):
        resp = attack.api.get(f"{base}/{name}", timeout=10)
        assert resp.status_code in (400, 404), (name, resp.status_code, resp.text[:200])
    # Writing through a planted link replaces the link; it never writes the target.
    assert attack.api.put(f"{base}/passwd", content=b"mine").status_code == 201
    assert attack.text(sid, "os.path.islink('passwd'), open('passwd').read()") == "(False, 'mine')"
    assert attack.api.get(f"{base}/plain.txt").content == b"plain"
    # Another session's workspace is nowhere under this one.
    guessed = f"/v1/sessions/{sid}/files/..%2F..%2F{victim}%2Fworkspace%2Fvictim.txt"
    assert attack.api.get(guessed).status_code in (400, 404)


@pytest.mark.parametrize("adv", ["docker"], indirect=True)
def test_another_key_guessing_ids_learns_nothing(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    result = attack.run(sid, "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
    artifact = result["outputs"][0]["artifacts"][0]["id"]
    attack.api.put(f"/v1/sessions/{sid}/files/secret.txt", content=b"secret")
    real = [
        ("GET", f"/v1/sessions/{sid}"),
        ("POST", f"/v1/sessions/{sid}/execute"),
        ("GET", f"/v1/sessions/{sid}/executions/{result['id']}"),
        ("GET", f"/v1/sessions/{sid}/files/secret.txt"),
        ("PUT", f"/v1/sessions/{sid}/files/secret.txt"),
        ("GET", f"/v1/sessions/{sid}/notebook"),
        ("GET", f"/v1/sessions/{sid}/artifacts/{artifact}"),
        ("POST", f"/v1/sessions/{sid}/restart"),
        ("DELETE", f"/v1/sessions/{sid}"),
    ]
    fake_sid = "s_" + secrets.token_urlsafe(18)
    with adv.client(OTHER_KEY) as other:
        for method, path in real:
            body = {"code": "1"} if path.endswith("execute") else None
            mine = other.request(method, path, json=body)
            guessed = other.request(method, path.replace(sid, fake_sid), json=body)
            assert mine.status_code == guessed.status_code == 404, (method, path)
            # The same answer for a real id of another key and an id that never existed.
            assert mine.json()["error"]["type"] == guessed.json()["error"]["type"]
        for _ in range(50):  # a bounded guessing spree
            assert other.get(f"/v1/sessions/s_{secrets.token_urlsafe(18)}").status_code == 404
        listed = [s["id"] for s in other.get("/v1/sessions").json()["sessions"]]
        assert sid not in listed
    # The owner's session is untouched by all of it.
    assert attack.api.get(f"/v1/sessions/{sid}/files/secret.txt").content == b"secret"
    assert attack.api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
