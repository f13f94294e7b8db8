# The Python hook of `tensorpool run`, its torch part: imported by sitecustomize.py only once the program
# imports torch.optim.optimizer, so that a program without torch neither loads nor compiles it (where bytecode
# is not written, PYTHONDONTWRITEBYTECODE=1 or a read-only install, Python compiles a module at every start).
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


def install():
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
