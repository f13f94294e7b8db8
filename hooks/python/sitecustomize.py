# The Python hook of `tensorpool run` (its directory is put first on PYTHONPATH): under the preload library,
# each torch optimizer step() ends an iteration of the process pool, so that a plan's schedule counts from
# the start of each training step. torch is never imported here: the mark is installed when the program
# imports torch.optim.optimizer. Outside the library, or without torch, it does nothing. Whatever fails
# leaves the program as it was (one line on stderr). Then the next sitecustomize on the path (the user's,
# or the distribution's) runs, as it would have without this one.
import sys


def _tensorpool_mark():
    """The preload library's iteration mark, or None outside it. ctypes is imported only here, once torch's
    optimizer is (torch imports it anyway): a program without torch does not pay for it."""
    import ctypes

    try:
        mark = ctypes.CDLL(None).tensorpool_mark_iteration  # defined by the preload library only
    except (AttributeError, OSError):
        return None
    mark.restype = ctypes.c_int
    mark.argtypes = []
    return mark


def _tensorpool_install():
    def on_optimizer_module(module):
        mark = _tensorpool_mark()
        if mark is None:
            return

        def after_step(optimizer, args, kwargs):
            mark()

        register = getattr(module, "register_optimizer_step_post_hook", None)  # torch >= 2.0
        if register is not None:
            register(after_step)
            return
        # Older torch: every optimizer's step() is wrapped by Optimizer._hook_for_profile, which __init__
        # calls; ours wraps that to mark after each step of each optimizer class.
        optimizer = module.Optimizer
        patched = set()
        original_init = optimizer.__init__

        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            cls = type(self)
            if cls in patched:
                return
            patched.add(cls)
            step = cls.step
            if getattr(step, "_tensorpool_marks", False):  # inherited from a class patched already
                return

            def marked_step(self, *a, **k):
                try:
                    return step(self, *a, **k)
                finally:
                    mark()

            marked_step._tensorpool_marks = True
            cls.step = marked_step

        optimizer.__init__ = __init__

    # Plain classes, not importlib.abc's: that module imports typing, tempfile, pathlib, lzma and more (4 MB
    # and tens of milliseconds at every start of every Python program under `tensorpool run`), and the import
    # system asks a finder for find_spec and a loader for create_module and exec_module only.
    class OptimizerFinder(object):
        """Waits for torch.optim.optimizer and installs the mark once it has executed."""

        def find_spec(self, name, path, target=None):
            if name != "torch.optim.optimizer":
                return None
            if _tensorpool_mark() is None:  # outside the library: torch's own loader, untouched
                sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    break
            else:
                return None
            loader = spec.loader
            exec_module = loader.exec_module

            class MarkingLoader(object):
                def create_module(self, spec):
                    return loader.create_module(spec)

                def __getattr__(self, name):  # get_source, get_filename, is_package...: the real loader's
                    return getattr(loader, name)

                def exec_module(self, module):
                    exec_module(module)
                    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, OptimizerFinder)]
                    try:
                        on_optimizer_module(module)
                    except Exception as error:  # never the program's problem
                        sys.stderr.write("tensorpool: torch optimizer steps are not marked (%s)\n" % error)

            spec.loader = MarkingLoader()
            return spec

    if "torch.optim.optimizer" in sys.modules:
        on_optimizer_module(sys.modules["torch.optim.optimizer"])
    else:
        sys.meta_path.insert(0, OptimizerFinder())


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


try:
    if sys.version_info >= (3, 4):  # torch's Pythons; before 3.4 there are no import hooks of this form
        _tensorpool_install()
except Exception as _error:
    sys.stderr.write("tensorpool: torch optimizer steps are not marked (%s)\n" % _error)
_tensorpool_chain()
