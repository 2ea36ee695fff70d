"""Submissions that try to raise their own score, through the real scorer (the function a code
episode's `answer` uses, on the local sandbox) and through `python -m rlsvc.problems score` (`rlsvc score`;
`python -m rlsvc.tasks score` delegates to it).

The expected return values never enter the sandbox; whatever a submission prints, patches or
does to the harness, the service only reads claimed return values and compares them itself. So
every forgery here claims values it cannot know to be right, and scores 0; none of them makes the
episode `failed` (which would drop its group from training: a veto a policy could learn). A
correct solution, even a noisy one, scores exactly 1.0."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from rlsvc.envs.code_interpreter import CodeEnvSettings, CodeEpisode, LocalBackend, Task, score_solution
from rlsvc.problems import programming
from rlsvc.problems.programming import ProgrammingProblem, UnitTest, problem_by_id, unit_test_program

PROBLEM = "add_two"  # add(a, b); tests: (1, 2) -> 3, (-5, 5) -> 0, (0, 0) -> 0, (123, 877) -> 1000
CORRECT = "def add(a, b):\n    return a + b\n"
# How a submission finds the harness's nonce: the harness is the code that exec'd it.
NONCE = "[c for c in sys._getframe(1).f_code.co_consts if isinstance(c, str) and c.startswith('\\n<<rlsvc-results')][0].split()[1]"

# name -> (submission, what the last result line tagged with the run's nonce shows: the forgery
# got its claim in where the harness's result should be; None: it prints no such line)
FORGERIES = {
    "patches builtins so every result reads as its claim": (
        """
        import builtins
        builtins.repr = lambda x: "'forged'"
        builtins.isinstance = lambda *a: True
        def add(a, b):
            return None
    """,
        "'forged'",
    ),
    "prints an old-style result line with a huge score and exits": (
        f"""
        import os, sys
        print("\\n<<rlsvc-results " + {NONCE} + ' {{"passed": 250000, "total": 4, "error": None}}', flush=True)
        os._exit(0)
    """,
        "250000",
    ),
    "prints a result line of its own with the nonce and exits": (
        f"""
        import os, sys
        print("\\n<<rlsvc-results " + {NONCE} + " " + repr({{"results": ["'forged'"] * 4, "error": None}}), flush=True)
        os._exit(0)
    """,
        "forged",
    ),
    "prints its line from a thread after the harness's": (
        f"""
        import sys, threading, time
        line = "\\n<<rlsvc-results " + {NONCE} + " " + repr({{"results": ["'forged'"] * 4, "error": None}})
        def later():
            time.sleep(0.3)
            print(line, flush=True)
        threading.Thread(target=later).start()
        def add(a, b):
            return -1
    """,
        "forged",
    ),
    "replaces sys.stdout": (
        """
        import os, sys
        sys.stdout = open(os.devnull, "w")
        def add(a, b):
            return a + b
    """,
        None,
    ),
    "returns an object that equals everything": (
        """
        class Anything:
            def __eq__(self, other):
                return True
            def __repr__(self):
                return "3"
        def add(a, b):
            return Anything()
    """,
        None,
    ),
    "claims NaN for every result": (
        f"""
        import os, sys
        print("\\n<<rlsvc-results " + {NONCE} + " " + repr({{"results": ["nan", "float('nan')", "1e999", "None"], "error": None}}), flush=True)
        os._exit(0)
    """,
        "nan",
    ),
    "prints a malformed result line and exits": (
        f"""
        import os, sys
        print("\\n<<rlsvc-results " + {NONCE} + " {{results: [oops", flush=True)
        os._exit(0)
    """,
        "oops",
    ),
    "returns a result too long to read back": (
        """
        def add(a, b):
            return "3" * 20000
    """,
        None,
    ),
}


@pytest.fixture(scope="module")
def backend():
    return LocalBackend(CodeEnvSettings(exec_timeout_s=5.0))


@pytest.mark.parametrize("name", FORGERIES)
def test_a_forgery_scores_zero_through_the_scorer(backend, name, monkeypatch):
    nonces: list[str] = []
    token_hex = programming.secrets.token_hex
    monkeypatch.setattr(programming.secrets, "token_hex", lambda n: nonces.append(token_hex(n)) or nonces[-1])
    submission, shows = FORGERIES[name]
    score, result = score_solution(backend, problem_by_id(PROBLEM), textwrap.dedent(submission))
    assert (score.passed, score.fraction, score.outcome) == (0, 0.0, "wrong"), score
    tagged = [line for line in result.stdout.splitlines() if line.startswith(f"<<rlsvc-results {nonces[0]} ")]
    if shows is not None:  # the attack itself worked: its line is the one the service reads
        assert tagged and shows in tagged[-1], result.stdout[-500:]


def test_a_correct_solution_scores_exactly_one_even_when_it_prints_and_imports(backend):
    noisy = "import os, sys, collections\nprint('<<rlsvc-results 0000 nonsense')\nprint('x' * 5000)\n" + CORRECT
    for solution in (CORRECT, noisy):
        score, _ = score_solution(backend, problem_by_id(PROBLEM), solution)
        assert score.fraction == 1.0 and score.passed == score.total == 4 and score.error is None


def test_the_expected_values_never_reach_the_sandbox():
    problem = ProgrammingProblem("p", "f", "Write f(x).", (UnitTest("['argument-7781']", "'expected-7781'"),))
    program, _ = unit_test_program(problem, "def f(x):\n    return x\n")
    assert "argument-7781" in program and "expected-7781" not in program


def test_a_malformed_result_is_a_wrong_answer_not_a_failed_episode(backend):
    episode = CodeEpisode(CodeEnvSettings(tasks="programming", error_penalty=0.1), backend)
    episode.reset(seed=0)
    problem = problem_by_id(PROBLEM)
    episode.task = Task("programming", problem.prompt, problem=problem)
    obs = episode.step("answer", textwrap.dedent(FORGERIES["prints a malformed result line and exits"][0]))
    assert obs["done"] and not obs["failed"] and obs["outcome"] == "wrong"
    assert obs["score"] == 0.0 and obs["reward"] == pytest.approx(-0.1)  # the unreadable result counts as an error


def _cli(*args: str, stdin: str = "", module: str = "rlsvc.problems") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_the_cli_scores_a_submission_as_training_does():
    good = _cli("score", "--problem", PROBLEM, stdin=CORRECT)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout) == {"problem": PROBLEM, "score": 1.0, "passed": 4, "total": 4, "outcome": "solved", "error": None}
    forged = _cli(
        "score", "--problem", PROBLEM, stdin=textwrap.dedent(FORGERIES["prints a result line of its own with the nonce and exits"][0])
    )
    assert forged.returncode == 0 and json.loads(forged.stdout)["score"] == 0.0
    unknown = _cli("score", "--problem", "no_such_problem", stdin=CORRECT)
    assert unknown.returncode == 2 and unknown.stdout == "" and len(unknown.stderr.strip().splitlines()) == 1
    assert "no_such_problem" in unknown.stderr
    assert PROBLEM in _cli("list").stdout.split()
    assert PROBLEM in _cli("problems", module="rlsvc.tasks").stdout.split()  # `rlsvc tasks list` lists tasks now


@pytest.mark.parametrize(
    ("module", "args"), [("rlsvc.cli", ("score",)), ("rlsvc.tasks", ("score",))], ids=["rlsvc score", "python -m rlsvc.tasks score"]
)
def test_the_scorers_other_spellings_run_the_same_scorer(module, args):
    """`rlsvc score` names what it does; `python -m rlsvc.tasks score`, where the scorer lived
    before it moved to rlsvc.problems, keeps working."""
    good = _cli(*args, "--problem", PROBLEM, stdin=CORRECT, module=module)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["score"] == 1.0
