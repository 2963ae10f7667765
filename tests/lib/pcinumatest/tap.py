"""TAP output for the libvirt suites (and the faults suite's libvirt
cases): Tap.check() prints "ok N - what" or "not ok N - what" with "#"
diagnostics, counts passes, failures and TODOs.  The caller prints the
closing "N passed, M failed" line."""
import sys


class Tap:
    def __init__(self, verbose=False):
        self.n = 0
        self.passed = 0
        self.failed = 0
        self.verbose = verbose
        self.failures = []
        self.todo = 0
        self.skipped = 0

    def diag(self, text):
        for line in str(text).rstrip("\n").splitlines():
            print("#   " + line)
        sys.stdout.flush()

    def check(self, ok, what, diag=None, note=None, todo=None):
        self.n += 1
        if not ok and todo:
            # TAP TODO: a known, structural difference; not counted
            self.todo += 1
            print("not ok %d - %s # TODO %s" % (self.n, what, todo))
            if diag and self.verbose:
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
