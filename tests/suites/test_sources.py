"""suites.sources: what one upstream test is made of in its file (pure, no torch)."""

from __future__ import annotations

from suites.results_file import clip_message
from suites.sources import sources_of
from suites.upstream import spyre_dtype_of

FILE = '''
_NAMES = ("add", "mul")
_OPS = [n for n in _NAMES]


def _helper(x):
    return _inner(x)


def _inner(x):
    return x


class Base(TestCase):
    def check(self, x):
        return _helper(x)


class TestFoo(Base):
    def test_a(self):
        """Docstrings are not code."""
        self.check(1)

    @ops(_OPS)
    def test_b(self, device, dtype, op):
        pass

    def test_c(self):
        pass
'''


def test_a_test_reaches_its_helpers_methods_and_module_names() -> None:
    a = sources_of(FILE, "TestFoo.test_a")
    assert a is not None
    assert a.qualnames == ("TestFoo.test_a", "Base.check", "_helper", "_inner")
    b = sources_of(FILE, "TestFoo.test_b")
    assert b is not None and b.module_names == ("_NAMES", "_OPS")
    assert sources_of(FILE, "TestFoo.test_missing") is None


def test_digest_follows_code_not_docstrings_or_comments() -> None:
    base = sources_of(FILE, "TestFoo.test_a")
    doc = sources_of(FILE.replace("Docstrings are not code.", "Other words."), "TestFoo.test_a")
    comment = sources_of(
        FILE.replace("    def test_c", "    # note\n    def test_c"), "TestFoo.test_a"
    )
    helper = sources_of(FILE.replace("return x\n", "return x + 0\n"), "TestFoo.test_a")
    other = sources_of(
        FILE.replace("def test_c(self):\n        pass", "def test_c(self):\n        return 1"),
        "TestFoo.test_a",
    )
    assert base and doc and comment and helper and other
    assert base.digest == doc.digest == comment.digest == other.digest
    assert helper.digest != base.digest
    ops_list = sources_of(FILE.replace('("add", "mul")', '("add",)'), "TestFoo.test_b")
    assert ops_list and ops_list.digest != sources_of(FILE, "TestFoo.test_b").digest  # type: ignore[union-attr]


def test_dtype_words_as_torch_spyre_reads_them() -> None:
    assert spyre_dtype_of("test_x_spyre_float32") == "float32"
    assert spyre_dtype_of("test_x_spyre_int32_float16") == "float16"  # longest words first
    assert spyre_dtype_of("test_gather_bool_spyre") == "bool"
    assert spyre_dtype_of("test_x_spyre") is None


def test_long_messages_keep_head_tail_and_the_exception_line() -> None:
    frames = "".join(f'  File "f{i}.py", line {i}, in g\n    call()\n' for i in range(50))
    exception = (
        "NotImplementedError: Could not run 'aten::foo' with arguments from the "
        "'PrivateUse1' backend."
    )
    text = (
        "Traceback (most recent call last):\n"
        + frames
        + exception
        + " backends:\n"
        + "CPU: registered\n" * 2000
    )
    clipped = clip_message(text, 2000)
    assert len(clipped) < 2200
    assert clipped.startswith("Traceback")
    assert "NotImplementedError: Could not run 'aten::foo'" in clipped
    assert clipped.endswith("CPU: registered")
    assert clip_message("short") == "short"
