# The Python hook of `tensorpool run` (its directory is put first on PYTHONPATH): under the preload library,
# each torch optimizer step() ends an iteration of the process pool, so that a plan's schedule counts from
# the start of each training step. torch is never imported here: once the program imports torch.optim, the
# hook's torch part (_tensorpool_torch.py) installs the mark. Outside the library, or without torch, it does
# nothing. Whatever fails leaves the program as it was (one line on stderr). Then the next sitecustomize on
# the path (the user's, or the distribution's) runs, as it would have without this one. Kept small: where
# bytecode is not written, Python compiles it at every start of every program.
import sys


class _TensorpoolOptimizerFinder(object):
    """Waits for torch.optim's import, then hands over to the torch part (a plain class, not importlib.abc's:
    that module imports typing, tempfile, pathlib, lzma and more at every start)."""

    def find_spec(self, name, path, target=None):
        if name != "torch.optim":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        try:
            import _tensorpool_torch

            _tensorpool_torch.install()
        except Exception as error:  # never the program's problem
            sys.stderr.write("tensorpool: torch optimizer steps are not marked (%s)\n" % error)
        return None


def _tensorpool_chain():
    """Runs the sitecustomize this one hides: the next one on sys.path after this directory."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    if sys.version_info < (3, 5):  # no importlib.util.module_from_spec: Python 2 finds it with imp
        import imp

        try:
            found = imp.find_module("sitecustomize", rest)
        except ImportError:
            return
        try:
            imp.load_module("sitecustomize", *found)
        finally:
            if found[0] is not None:
                found[0].close()
        return
    try:  # the import system's own modules, loaded at every start (importlib.util imports a dozen more)
        import _frozen_importlib as bootstrap
        import _frozen_importlib_external as external
    except ImportError:
        import importlib.machinery as external
        import importlib.util as bootstrap

    spec = external.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = bootstrap.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # as if Python had imported it itself
    spec.loader.exec_module(module)


if sys.version_info >= (3, 4):  # torch's Pythons; before 3.4 there are no import hooks of this form
    if "torch.optim" in sys.modules:
        _TensorpoolOptimizerFinder().find_spec("torch.optim", None)
    else:
        sys.meta_path.insert(0, _TensorpoolOptimizerFinder())
_tensorpool_chain()
