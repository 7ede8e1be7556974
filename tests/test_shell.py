"""What a command reads and writes, judged from its text: the basis of 'never dedup across an edit'."""

from __future__ import annotations

import pytest

from refold.shell import analyze, paths_overlap


@pytest.mark.parametrize(
    ("command", "kind", "reads", "writes", "anything"),
    [
        ("nl -ba django/a.py | sed -n '1,100p'", "read", ("django/a.py",), (), False),
        ("sed -i 's/a/b/' x.py && cat x.py", "edit", ("x.py",), ("x.py",), False),
        ("cat <<EOF > t.py\nprint(1)\nEOF", "edit", (), ("t.py",), False),
        ("grep -rn foo src/", "search", ("src",), (), False),
        ("python -m pytest tests/x.py", "test", (), (), False),
        ("git checkout x.py", "edit", (), (), True),
        ("patch -p1 < fix.diff", "edit", ("fix.diff",), (), True),
        ("echo hi > /dev/null", "command", (), (), False),
        ("python3 - <<'EOF'\ns = open('a.py').read()\nopen('a.py', 'w').write(s)\nEOF", "edit", (), (), True),
        ("python3 - <<'EOF'\nprint(open('a.py').read())\nEOF", "command", (), (), False),
        ("python -c \"open('a.py','w').write('x')\"", "edit", (), (), True),
        ("echo x | tee -a log.txt", "edit", (), ("log.txt",), False),
    ],
)
def test_analyze(command: str, kind: str, reads: tuple[str, ...], writes: tuple[str, ...], anything: bool) -> None:
    info = analyze(command)
    assert (info.kind, info.reads, info.writes, info.writes_anything) == (kind, reads, writes, anything)


def test_paths_overlap() -> None:
    assert paths_overlap("/testbed/django/a.py", "django/a.py")
    assert paths_overlap("django", "django/a.py")
    assert not paths_overlap("django/a.py", "django/b.py")
