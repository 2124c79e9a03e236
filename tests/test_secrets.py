"""Credentials are found and masked; ordinary prose and code pass through untouched."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronicle_engine.capture.secrets import find_secrets, mask

# (text, the value that must disappear, the kind it is reported as)
CREDENTIALS = [
    (
        "my key is sk-proj-Ab3dEf5hIj7kLm9nOp1qRs3tUv5wXy7z ok",
        "sk-proj-Ab3dEf5hIj7kLm9nOp1qRs3tUv5wXy7z",
        "openai_key",
    ),
    ("OPENAI: sk-Zx81ab29Cd74ef56Gh03ij12KL", "sk-Zx81ab29Cd74ef56Gh03ij12KL", "openai_key"),
    (
        "claude: sk-ant-api03-AbCdEf1234567890AbCdEf1234567890",
        "sk-ant-api03-AbCdEf1234567890AbCdEf1234567890",
        "anthropic_key",
    ),
    (
        "push with ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5",
        "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5",
        "github_token",
    ),
    (
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "github_token",
    ),
    ("aws id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("slack xoxb-123456789012-abcdefghijkl", "xoxb-123456789012-abcdefghijkl", "slack_token"),
    (
        "maps AIzaSyD-1234567890abcdefghijklmnopqrstu",
        "AIzaSyD-1234567890abcdefghijklmnopqrstu",
        "google_api_key",
    ),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
    ("Authorization: Bearer abc123def456ghi789jkl", "abc123def456ghi789jkl", "bearer_token"),
    (
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "jwt",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        "private_key",
    ),
    ("password=hunter2", "hunter2", "password"),
    ("my passwd: swordfish", "swordfish", "password"),
    ('secret = "s3cr3t value"', "s3cr3t value", "secret"),
    ('{"api_key": "abcd1234efgh"}', "abcd1234efgh", "api_key"),
    ("export GITHUB_TOKEN=abc123xyz789", "abc123xyz789", "token"),
    ("postgres://admin:Sup3rS3cret@db.example.com:5432/app", "Sup3rS3cret", "url_credentials"),
    ("ci uses glpat-Ab12Cd34Ef56Gh78Ij90kL", "glpat-Ab12Cd34Ef56Gh78Ij90kL", "gitlab_token"),
    (
        "HF_TOKEN is hf_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3x",
        "hf_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3x",
        "huggingface_token",
    ),
    # Fixed formats need no digit: one real key in a few dozen has none.
    ("aws AKIAQWERTYUIOPASDFGH", "AKIAQWERTYUIOPASDFGH", "aws_access_key"),
    ("my token is ghp_" + "a" * 36, "ghp_" + "a" * 36, "github_token"),
    # Said in plain words.
    ("my wifi password is hunter22", "hunter22", "password"),
    ("The PIN is 4821.", "4821", "pin"),
    ("the api key for staging is Zt7kQ2mx9Lp4", "Zt7kQ2mx9Lp4", "api_key"),
    ("card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111", "card_number"),
    (
        "session cookie Xk9mP2qL7vR4tY8wZ3nB6cD1fG5hJ0sA9",
        "Xk9mP2qL7vR4tY8wZ3nB6cD1fG5hJ0sA9",
        "opaque_token",
    ),
]

PROSE = [
    "I used scikit-learn (sk-learn) and the task-management-system for this.",
    "The password field must be at least 8 characters long.",
    "Use the key: value syntax in YAML files.",
    "We need a bearer token for the API, see the docs.",
    "Secret: the meeting is moved to Thursday.",
    "Basic authentication is simple but not secure over plain HTTP.",
    "My keyboard: a split layout. My monkey: George. The turkey: roasted.",
    "Tokens: 1500 in, 300 out. The token budget is fine.",
    "Passwords should be long; a passphrase is better than a password.",
    "See https://example.com/path?x=1 and https://user@github.com/org/repo for details.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed uuid 123e4567-e89b-12d3-a456-426614174000",
    "Ask-me-anything threads are fun; desk-lamp reviews too.",
    "Deploy 550e8400-e29b-41d4-a716-446655440000 from /var/lib/app/550e8400-e29b-41d4-a716-446655440000/data.json",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "git checkout 9fceb02d0ae598e95dc970b74767f19372d61af8 && git log -1",
    "The password is incorrect, try again. My token is expired.",
    "The api key is stored-in-the-team-vault; the PIN code is required at checkout.",
    "Keys: the api key is on the card.",
    "Invoice 1234 5678 9012 3456 is paid; timestamp 1700000000123 in ms.",
    "validate_user_input_for_the_new_api_v2_endpoint_handler",
    "pod web-7d9f8c6b5-x2k4p restarted",
    "/usr/lib/python3.11/site-packages/pydantic_core-2.14.5.dist-info/RECORD",
]

CODE = [
    "def login(username: str, password: str) -> bool:\n    return check(password=password)",
    "token = tokenizer.encode(text)",
    "password = getpass.getpass()",
    "secret = os.environ['SECRET']",
    "if password == expected:\n    pass",
    "api_key: Optional[str] = None",
    "max_tokens=4096, temperature=0.2",
    "token: ${GITHUB_TOKEN}",
    "password: <your password>",
    "password_hash = hash_password(pw)",
    "access_token=access_token",
    "self.api_key = api_key",
    "DATABASE_URL=postgres://localhost:5432/app",
    "headers = {'Authorization': f'Bearer {token}'}",
    "key = hashlib.sha256(data).hexdigest()",
    "for key, value in items.items():",
    "const pass = args.pass || defaults.pass;",
]


@pytest.mark.parametrize(("text", "value", "kind"), CREDENTIALS)
def test_credentials_are_masked(text, value, kind):
    masked = mask(text)
    assert value not in masked
    assert f"«masked:{kind}»" in masked
    assert [f.kind for f in find_secrets(text)] == [kind]


def test_at_least_five_shapes_are_covered():
    assert len({kind for _, _, kind in CREDENTIALS}) >= 5


@pytest.mark.parametrize("text", PROSE + CODE)
def test_no_false_positive_on_prose_or_code(text):
    assert find_secrets(text) == []
    assert mask(text) == text


def test_only_the_value_is_masked_the_key_name_stays_readable():
    assert mask("DB_PASSWORD=correcthorse then more") == "DB_PASSWORD=«masked:password» then more"


@given(st.text(max_size=200))
def test_law_masking_is_idempotent_and_leaves_nothing_to_find(text):
    once = mask(text)
    assert mask(once) == once
    assert find_secrets(once) == []


@given(
    st.sampled_from(CREDENTIALS),
    st.text(alphabet=st.characters(whitelist_categories=["Zs"]), max_size=3),
)
def test_law_a_credential_inside_any_sentence_is_masked(case, pad):
    text, value, _ = case
    assert value not in mask(f"Here you go:{pad} {text}{pad} thanks")


def test_masking_a_text_again_gives_what_a_fresh_scan_gives_and_keeps_no_credential():
    """`mask` remembers texts it found clean, so the second masking of a captured message (recall
    folds what capture masked) is a lookup: the answer is the scan's, a text that held a
    credential is never remembered (only its masked form is), and the memory stays bounded."""
    from chronicle_engine.capture import secrets

    remembered = 0
    for text, value, _kind in CREDENTIALS:
        masked = mask(text)
        assert value not in masked and text not in secrets._clean
        if masked in secrets._clean:  # only a text a scan finds nothing in
            assert find_secrets(masked) == []
            remembered += 1
        assert mask(masked) == masked and mask(text) == masked
    assert remembered >= len(CREDENTIALS) // 2
    plain = "nothing to hide in this sentence, only a deploy and a key question"
    assert mask(plain) == plain and plain in secrets._clean
    for i in range(secrets._CLEAN_ENTRIES + 10):
        mask(f"filler text number {i}")
    assert len(secrets._clean) <= secrets._CLEAN_ENTRIES
    assert secrets._clean_chars == sum(len(t) for t in secrets._clean)
    assert secrets._clean_chars <= secrets._CLEAN_CHARS
