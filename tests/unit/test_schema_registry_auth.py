"""The schema registry's realm file: Jetty's OBF:/MD5:/CRYPT: password forms (checked against
the vectors Jetty's Password tool prints for 'password' / user 'username') and roles."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from strom.schema_registry.auth import Credential, authenticate, deobfuscate, load_realm, obfuscate


def test_jetty_password_forms() -> None:
    assert obfuscate("password") == "OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v"
    assert deobfuscate("OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v") == "password"
    for pw in ("a", "pässwörd", "日本語 pw", "x" * 40):  # the U-prefixed form for non-ASCII bytes
        assert deobfuscate(obfuscate(pw)) == pw
    with pytest.raises(ValueError, match="OBF"):
        deobfuscate("OBF:!!!!")
    md5 = Credential("u", "MD5:5f4dcc3b5aa765d61d8327deb882cf99")
    assert md5.check("password") and not md5.check("Password")
    assert Credential("u", "MD5:5F4DCC3B5AA765D61D8327DEB882CF99").check("password")  # hex, any case
    crypt = Credential("username", "CRYPT:usjRS48E8ZADM")
    assert crypt.check("password") and not crypt.check("passwore")
    plain = Credential("u", "s3cret")
    assert plain.check("s3cret") and not plain.check("s3cre")


def test_realm_file_and_roles(tmp_path: Path) -> None:
    realm = tmp_path / "realm.properties"
    realm.write_text(
        "# comment\n! also a comment\n\nadmin: MD5:5f4dcc3b5aa765d61d8327deb882cf99, admin\n"
        "ro: OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v,readonly\nplain: pw\n"
        "dev: CRYPT:usjRS48E8ZADM , developer, readonly\n"
    )
    users = load_realm(str(realm))
    assert users["ro"].stored == "password" and users["ro"].roles == ("readonly",)
    assert [u.may_write for u in users.values()] == [True, False, True, True]

    def header(user: str, pw: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()

    assert authenticate(header("ro", "password"), users) is users["ro"]
    assert authenticate(header("dev", "password"), users) is users["dev"]
    assert authenticate(header("ro", "nope"), users) is None
    assert authenticate(header("ghost", "password"), users) is None
    assert authenticate("Bearer x", users) is None
    assert authenticate("Basic !!!", users) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alice\n", "expected 'user: password"),
        ("alice: MD5:abc\n", "32 hex digits"),
        ("alice: OBF:zz\n", "OBF"),
        ("alice: CRYPT:x\n", "crypt(3) hash"),
        ("# nobody\n", "no users"),
    ],
)
def test_bad_realm_files(tmp_path: Path, text: str, message: str) -> None:
    realm = tmp_path / "realm"
    realm.write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_realm(str(realm))
