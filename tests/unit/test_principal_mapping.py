"""ssl.principal.mapping.rules: Kafka's SslPrincipalMapper rules and their parsing."""

from __future__ import annotations

import pytest

from strom.security.principal_mapping import NoRuleAppliesError, PrincipalMappingError, SslPrincipalMapper

DN = "CN=Alice Smith,OU=ServiceUsers,O=Example,C=US"


def test_default_keeps_the_dn():
    assert SslPrincipalMapper().name(DN) == DN
    assert SslPrincipalMapper("DEFAULT").name(DN) == DN
    assert SslPrincipalMapper("").name(DN) == DN


def test_rule_with_group_and_case():
    m = SslPrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    assert m.name(DN) == "Alice Smith"
    m = SslPrincipalMapper(r"RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$3/L")
    assert m.name(DN) == "alice smith@example"
    assert SslPrincipalMapper(r"RULE:^CN=(.*?),OU=.*$/$1/U").name(DN) == "ALICE SMITH"


def test_first_applying_rule_wins_and_default_falls_back():
    rules = "RULE:^CN=(.*?),OU=Admins.*$/admin-$1/,\nRULE:^CN=(.*?),OU=ServiceUsers.*$/svc-$1/, DEFAULT"
    m = SslPrincipalMapper(rules)
    assert m.name(DN) == "svc-Alice Smith"
    assert m.name("CN=Bob,OU=Admins,O=x") == "admin-Bob"
    assert m.name("CN=Carol,O=x") == "CN=Carol,O=x"


def test_comma_inside_a_pattern_belongs_to_it():
    m = SslPrincipalMapper(r"RULE:^CN=([^,]*),O=Example.*$/$1/L,DEFAULT")
    assert m.name("CN=Dan,O=Example,C=US") == "dan"


def test_no_rule_applies():
    with pytest.raises(NoRuleAppliesError, match="No rules apply to CN=x"):
        SslPrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x")


@pytest.mark.parametrize("bad", ["NOTARULE", "RULE:abc", "RULE:^CN=(.*$/$1/", "DEFAULT,garbage"])
def test_malformed_rules_refused(bad):
    with pytest.raises(PrincipalMappingError):
        SslPrincipalMapper(bad)
