"""size_check.py finds what is long, and only that."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import size_check  # noqa: E402


def body(n):
    """n lines of statements."""
    return "".join(f"  x += {i};\n" for i in range(n))


class CcFunctionsTest(unittest.TestCase):
    def lengths(self, text):
        return {name: last - first + 1 for name, first, last in size_check.cc_functions(text)}

    def test_counts_from_the_signature_to_the_closing_brace(self):
        text = "int Foo(int a,\n        int b) {\n" + body(5) + "}\n"
        self.assertEqual(self.lengths(text), {"Foo": 8})

    def test_control_blocks_lambdas_and_classes_inside_count_toward_the_function(self):
        text = ("void Bar() {\n  if (a) {\n    b();\n  }\n  auto f = [&](int x) {\n"
                "    return x;\n  };\n  struct S { int g() { return 1; } };\n}\n")
        self.assertEqual(self.lengths(text), {"Bar": 9})

    def test_braces_in_strings_and_comments_are_not_code(self):
        text = ('void Baz() {\n  s = "}{ {";\n  // } {\n  /* {\n } */\n'
                "  c = '{';\n  r = R\"(})\";\n}\nint Next() { return 0; }\n")
        self.assertEqual(self.lengths(text), {"Baz": 8, "Next": 1})

    def test_methods_in_a_class_and_a_namespace(self):
        text = ("namespace a {\nclass C {\n public:\n  int Get() const {\n    return v_;\n  }\n"
                "  int v_ = 0;\n};\nC::C() : v_(1) {\n}\n}  // namespace a\n")
        self.assertEqual(self.lengths(text), {"Get": 3, "C::C": 2})

    def test_initializer_lists_are_not_functions(self):
        text = "const std::vector<int> kV = {\n  1,\n  2,\n};\nstruct P p{f(1)};\n"
        self.assertEqual(self.lengths(text), {})


class CheckTest(unittest.TestCase):
    def test_reports_functions_over_80_and_files_over_500_lines(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "server"))
            with open(os.path.join(root, "server", "a.cc"), "w") as f:
                f.write("void At80() {\n" + body(78) + "}\n")  # 80 lines: fine.
                f.write("void At81() {\n" + body(79) + "}\n")  # 81 lines.
            with open(os.path.join(root, "server", "b.py"), "w") as f:
                f.write("def long_one():\n" + "    x = 1\n" * 81 + "\n\ndef short():\n    pass\n")
                f.write("# filler\n" * 420)
            report = size_check.check(root, ["server/a.cc", "server/b.py"])
        self.assertEqual(report, [
            "file over 500 lines: server/b.py (506)",
            "function over 80 lines: server/b.py:1 long_one (82)",
            "function over 80 lines: server/a.cc:81 At81 (81)",
        ])

    def test_tests_benchmarks_and_helpers_are_not_production(self):
        for path in ("tests/x.cc", "bench/y.py", "server/table_test.cc", "worker/trainer_test_fakes.h",
                     "tests/testing/netbox.cc", "common/checkpoint/fuzz/f.cc", "README.md"):
            self.assertFalse(size_check.is_production(path), path)
        for path in ("server/table.cc", "worker/model/dlrm.h", "deploy/local/ps_launch.py"):
            self.assertTrue(size_check.is_production(path), path)


if __name__ == "__main__":
    unittest.main()
