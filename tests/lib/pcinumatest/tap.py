"""TAP output for the Python suites: Tap.check() prints "ok N - what" or
"not ok N - what" with "#" diagnostics, counts passes, failures and TODOs;
Tap.finish() prints the closing "N passed, M failed" line and gives the
exit status.  A suite with no other state keeps one Tap for the module:
TAP = Tap(); check = TAP.check; ... sys.exit(TAP.finish()).  Tap.run()
is the loop of suites made of case functions (one check per case, which
fails by raising): the hook suite, and pcinumatest.daemon.Results."""
import sys
import time
import traceback


class Tap:
    def __init__(self, verbose=False, diag_first=None, diag_last=None):
        """verbose: diagnostics of passing checks too; diag_first or
        diag_last: print at most that many lines of a diagnostic (its
        first or its last ones)."""
        self.n = 0
        self.diag_first = diag_first
        self.diag_last = diag_last
        self.passed = 0
        self.failed = 0
        self.verbose = verbose
        self.failures = []
        self.todo = 0
        self.skipped = 0

    def diag(self, text):
        lines = str(text).rstrip("\n").splitlines()
        if self.diag_first is not None:
            lines = lines[:self.diag_first]
        if self.diag_last is not None:
            lines = lines[-self.diag_last:]
        for line in lines:
            print("#   " + line)
        sys.stdout.flush()

    def check(self, ok, what, diag=None, note=None, todo=None):
        self.n += 1
        if not ok and todo:
            # TAP TODO: a known, structural difference; not counted
            self.todo += 1
            print("not ok %d - %s # TODO %s" % (self.n, what, todo))
            if diag:
                self.diag(diag)
            sys.stdout.flush()
            return False
        if ok:
            self.passed += 1
            print("ok %d - %s%s" % (self.n, what, (" # " + note) if note else ""))
            if diag and self.verbose:
                self.diag(diag)
        else:
            self.failed += 1
            self.failures.append(what)
            print("not ok %d - %s%s" % (self.n, what,
                                        (" # " + note) if note else ""))
            if diag:
                self.diag(diag)
        sys.stdout.flush()
        return ok

    def ok(self, ok, what, diag=None, todo=None):
        """check() under the name pcinumatest.guestvm's helpers call."""
        return self.check(ok, what, diag, todo=todo)

    def run(self, what, fn, expected=(AssertionError,), timed=False):
        """Run one case as one check: fn() passes by returning, skips by
        returning a string (the reason: "ok N - what # SKIP reason"), and
        fails by raising.  The diagnostic of a failure is the exception's
        message for the classes in expected, else the traceback.  timed:
        the seconds taken follow what on a pass.  Returns False when it
        failed."""
        t0 = time.monotonic()
        try:
            skip = fn()
        except expected as e:
            return self.check(False, what, str(e))
        except Exception:  # noqa: BLE001 - report it and go on
            return self.check(False, what, traceback.format_exc())
        if isinstance(skip, str):
            self.skipped += 1
            return self.check(True, what, note="SKIP " + skip)
        if timed:
            what = "%s (%.2f s)" % (what, time.monotonic() - t0)
        return self.check(True, what)

    def finish_plan(self):
        """The close of a suite meson parses as TAP ('protocol' : 'tap' in
        tests/meson.build): the plan "1..N" after the checks, the counts as
        a comment; returns the exit status, 1 when a check failed."""
        print("1..%d" % self.n)
        print("# %d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()
        return 1 if self.failed else 0

    def finish(self):
        """Print the closing "N passed, M failed" line; return the exit
        status: 0 when checks ran and none failed, else 1."""
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()
        return 0 if self.passed and not self.failed else 1
