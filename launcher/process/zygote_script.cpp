// SPDX-License-Identifier: MIT
// The zygote's Python side, embedded so that the binary, the wheel and the .deb need no file next
// to them. ddprun runs `PYTHON -u -c <kZygoteBootstrap> FD MODE TARGET MOD...` and sends this as
// the first message on FD (zygote.hpp), so that `ps` shows a short command line.
#include "launcher/process/zygote_script.hpp"

namespace ddp::launcher {

const std::string_view kZygoteBootstrap =
    "import os,sys;exec(compile(os.read(int(sys.argv[1]),1<<20),'<ddprun-zygote>','exec'))";

const std::string_view kZygoteScript = R"PY(
import os, sys, json, socket, struct, signal, time, traceback, types, builtins, posix
# The real fork, saved before any module imports: a module may wrap or replace os.fork (a tracer
# whose child forks once more, a library that forbids fork), and the zygote's own forks are not
# the program's. (os.register_at_fork hooks still run: the interpreter calls them in any fork.)
_fork = posix.fork
_FD, _MODE, _TARGET = int(sys.argv[1]), sys.argv[2], sys.argv[3]
_MODULES = [m for m in sys.argv[4:] if m]
_TORCH_DEFAULT_SEED = 67280421310721  # c10's default_rng_seed_val: torch 1.x's first seed
_MAX_FDS = 8
_GIVEN_ENV = dict(os.environ)  # before the imports: what ddprun gave (and the interpreter added)
_GIVEN_UMASK = os.umask(0o22)
os.umask(_GIVEN_UMASK)
_GIVEN_CWD = os.getcwd()
_PATH_FIRST_AT_IMPORT = None  # the sys.path[0] the imports saw (_refusal)
_ARGV_AT_IMPORT = None  # the sys.argv the imports saw (_refusal)
_SET_MEMPOLICY = {'x86_64': 238, 'aarch64': 237, 'riscv64': 237, 'ppc64le': 261, 'ppc64': 261,
                  's390x': 270}


def _receive(sock):
    # One request: a small header naming its size, its JSON in a memfd (the first descriptor,
    # so that no argv or environment is too large for a datagram), then the passed descriptors.
    data, fds, _, _ = socket.recv_fds(sock, 4096, _MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    size = json.loads(data)['size']
    body, fds = fds[0], fds[1:]
    chunks, done = [], 0
    while done < size:
        chunk = os.pread(body, size - done, done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    os.close(body)
    return json.loads(b''.join(chunks)), fds


def _added_at_startup():
    # What the interpreter put into its own environment while starting (PEP 538's LC_CTYPE
    # coercion): an exec'd worker's interpreter does the same to the environment ddprun gave it.
    try:
        with open('/proc/self/environ', 'rb') as f:
            given = {e.split(b'=', 1)[0] for e in f.read().split(b'\0') if e}
    except OSError:
        return {}
    return {k: v for k, v in os.environ.items() if os.fsencode(k) not in given}


_STARTUP_ADDED = _added_at_startup()


def _first_path_entry(mode, target, cwd):
    # What `python script.py` / `python -m mod` / `python -c code` put first on sys.path, started
    # in `cwd` (ddprun's: a module may have changed the zygote's at import).
    if mode == 'script':
        return os.path.dirname(os.path.realpath(os.path.join(cwd, target)))
    if mode == 'module':
        return cwd
    return ''


def _argv_at_import(args):
    # What an exec'd worker's sys.argv is while its imports run: the script and its arguments
    # (for -m, '-m' until runpy has found the module, as in `python -m`; for -c, '-c').
    if _MODE == 'script':
        return [_TARGET] + args
    return ['-m' if _MODE == 'module' else '-c'] + args


def _live_children():
    me, names = os.getpid(), []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(')') + 2:].split()
        if int(fields[1]) == me and fields[0] != 'Z':
            names.append(stat[stat.index('(') + 1:stat.rindex(')')])
    return names


def _refusal(setup):
    try:
        import importlib
        global _ARGV_AT_IMPORT
        sys.argv = _argv_at_import(setup.get('args', []))
        _ARGV_AT_IMPORT = list(sys.argv)
        global _PATH_FIRST_AT_IMPORT
        sys.path[0] = _PATH_FIRST_AT_IMPORT = _first_path_entry(_MODE, _TARGET, _GIVEN_CWD)
        for name in _MODULES:
            importlib.import_module(name)
    except BaseException as e:  # a SystemExit in a module is a failed import too
        return 'preload import failed: %s' % ''.join(
            traceback.format_exception_only(type(e), e)).strip().splitlines()[-1]
    tasks = os.listdir('/proc/self/task')
    if len(tasks) > 1:
        # Thread pools that stop themselves before a fork (OpenBLAS's, started by `import torch`,
        # has a pthread_atfork handler) are safe: fork once and count what is left.
        probe = _fork()
        if probe == 0:
            os._exit(0)
        os.waitpid(probe, 0)
        tasks = os.listdir('/proc/self/task')
    if len(tasks) > 1:
        names = []
        for t in tasks:
            try:
                with open('/proc/self/task/%s/comm' % t) as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        return 'the preloaded modules left %d threads running (%s); fork needs one' % (
            len(tasks), ', '.join(sorted(names)))
    children = _live_children()
    if children:
        # Every forked worker would share them (their pipes, their locks), and none would be
        # its parent.
        return ('the preloaded modules left %d child process%s running (%s); forked workers '
                'would share them' % (len(children), '' if len(children) == 1 else 'es',
                                       ', '.join(sorted(children))))
    torch = sys.modules.get('torch')
    cuda = getattr(torch, 'cuda', None)
    if cuda is not None and getattr(cuda, 'is_initialized', lambda: False)():
        return 'the preloaded modules initialised CUDA; a forked worker could not use it'
    return None


def _send(sock, obj):
    sock.sendmsg([json.dumps(obj).encode()])


def _serve(sock):
    # One request at a time; returns (request, fds) in the worker, None when ddprun goes away.
    while True:
        try:
            req, fds = _receive(sock)
        except (OSError, ValueError, KeyError, IndexError):
            return None  # ddprun went away, or spoke nonsense: it gives this zygote up
        if req is None:
            return None
        r, w = os.pipe()
        try:
            pid = _fork()
        except OSError as e:
            os.close(r)
            os.close(w)
            for fd in fds:
                os.close(fd)
            _send(sock, {'error': 'the zygote could not fork a worker: %s' % e})
            continue
        if pid == 0:  # the intermediate: fork the worker and go, so that it reparents to ddprun
            os.close(r)
            try:
                worker = _fork()
            except BaseException:
                os._exit(0)  # the zygote reads no pid: an error, and this worker is exec'd
            if worker == 0:
                # Its own session at once: giving the zygote up kills the zygote's group (what a
                # module started, an unclaimed worker's intermediate), not a claimed worker.
                os.setsid()
                os.close(w)
                sock.close()
                return req, fds
            os.write(w, struct.pack('i', worker))
            os._exit(0)
        os.close(w)
        for fd in fds:
            os.close(fd)
        got = os.read(r, 4)
        os.close(r)
        os.waitpid(pid, 0)
        if len(got) == 4:
            _send(sock, {'pid': struct.unpack('i', got)[0]})
        else:
            _send(sock, {'error': 'the zygote could not fork a worker'})


def _fail(report, err, code=70):
    try:
        os.write(report, struct.pack('i', err or 5))  # 0 says 'set up'; 5: EIO
    finally:
        os._exit(code)


def _set_preferred_node(node):
    # --numa-binding: MPOL_PREFERRED as the exec path sets it (spawn_posix.cpp); best effort.
    import ctypes
    number = _SET_MEMPOLICY.get(os.uname().machine)
    if node < 0 or number is None:
        return
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask = (ctypes.c_ulong * 16)()
    if node >= 16 * bits:
        return
    mask[node // bits] |= 1 << (node % bits)
    ctypes.CDLL(None, use_errno=True).syscall(ctypes.c_long(number), ctypes.c_long(1), mask,
                                              ctypes.c_ulong(16 * bits))


def _apply_environment(entries):
    # A change over the environment the imports left: what ddprun sets for this rank (a value
    # the zygote was not given) wins; what ddprun removed for this rank goes; what a module set,
    # changed or removed at import stays so where ddprun gives the rank what it gave the zygote,
    # as in an exec'd worker, whose modules change the environment ddprun gave it.
    want = {}
    for entry in entries:
        key, _, value = entry.partition('=')
        want[key] = value
    for key in list(os.environ):
        if key not in want and key in _GIVEN_ENV and key not in _STARTUP_ADDED:
            del os.environ[key]  # unsetenv: the C environ follows
    for key, value in want.items():
        if _GIVEN_ENV.get(key) == value and os.environ.get(key) != value:
            continue  # the imports changed or removed it; ddprun sets nothing new here
        if os.environ.get(key) != value:
            os.environ[key] = value


def _apply_path(first):
    # sys.path as an exec'd worker's: its first entry where the imports' first entry was, and
    # whatever the imports added (a plugin directory inserted before it) kept, in their order.
    for i, entry in enumerate(sys.path):
        if entry == _PATH_FIRST_AT_IMPORT:
            sys.path[i] = first
            return
    if _PATH_FIRST_AT_IMPORT is None:
        sys.path[0] = first


def _become_worker(req, fds):
    named = dict(zip(req['fds'], fds))
    report = named['report']
    parent = req['parent']
    deadline = time.monotonic() + 10
    while os.getppid() != parent:  # the intermediate is exiting; ddprun (the subreaper) adopts us
        if time.monotonic() > deadline:
            _fail(report, -10)  # -ECHILD
        time.sleep(0.0002)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        _fail(report, ctypes.get_errno())
    if os.getppid() != parent:
        os._exit(70)  # ddprun died before the prctl
    if 'cgroup' in named:
        try:
            os.write(named['cgroup'], b'0')
        except OSError as e:
            _fail(report, -e.errno)
        os.close(named['cgroup'])
    for sig in signal.valid_signals():
        if sig in _DISPOSITIONS:
            try:
                signal.signal(sig, _DISPOSITIONS[sig])
            except (OSError, ValueError, TypeError):
                pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    if req.get('cpus'):
        try:
            os.sched_setaffinity(0, req['cpus'])
        except OSError:
            pass
    _set_preferred_node(req.get('memory_node', -1))
    os.dup2(named['stdout'], 1)
    os.dup2(named['stderr'], 2)
    for name in ('stdout', 'stderr'):
        if named[name] > 2:
            os.close(named[name])
    # ddprun sets neither for an exec'd worker: it inherits ddprun's, which its modules may change
    # at import. So a module's umask or working directory stays; ddprun's own (as now) otherwise.
    imported_umask = os.umask(req['umask'])
    if imported_umask != _GIVEN_UMASK:
        os.umask(imported_umask)  # a module set it: the module's stays
    try:
        moved = os.getcwd() != _GIVEN_CWD
    except OSError:
        moved = True  # a module's directory that has gone: as an exec'd worker would be
    if not moved:
        os.chdir(req['cwd'])
    _apply_environment(req['env'])
    # Only the zygote's own descriptors went (its socket, the request's); whatever the preloaded
    # modules opened at import (a log file) stays theirs, as in an exec'd worker.
    for name in ('stdout', 'stderr'):
        old = getattr(sys, name)
        new = __import__('io').TextIOWrapper(
            __import__('io').FileIO(1 if name == 'stdout' else 2, 'w', closefd=False),
            encoding=old.encoding, errors=old.errors, newline='\n',
            line_buffering=False, write_through=True)
        setattr(sys, name, new)
        setattr(sys, '__%s__' % name, new)
    # Per-process secrets and seeds, as an exec'd worker draws its own.
    import random
    random.seed()
    mp = sys.modules.get('multiprocessing.process')
    if mp is not None:
        mp.current_process().authkey = os.urandom(32)
    np = sys.modules.get('numpy')
    if np is not None and hasattr(np, 'random'):
        np.random.seed()
    torch = sys.modules.get('torch')
    if torch is not None and hasattr(torch, 'random'):
        if _TORCH_FIXED_SEED:  # torch 1.x: every fresh interpreter starts from the same seed
            torch.random.default_generator.manual_seed(_TORCH_DEFAULT_SEED)
        else:  # torch 2.x seeds its default generator from the OS
            torch.random.default_generator.seed()
    os.write(report, struct.pack('i', 0))  # set up: ddprun execs this rank if anything above failed
    # Claimed: ddprun has recorded this pid and says go. EOF (ddprun never learnt the pid: the
    # zygote died before answering, or gave up on it) means this process is nobody's worker.
    try:
        go = os.read(report, 1)
    except OSError:
        go = b''
    if go != b'g':
        os._exit(0)
    os.close(report)  # its EOF tells ddprun the worker runs


def _strip_own_frames(tb):
    # Everything up to and including _run is the zygote's; the program's frames follow.
    first = tb
    while tb is not None:
        if tb.tb_frame.f_code is _run.__code__:
            return tb.tb_next
        tb = tb.tb_next
    return first


def _run(req):
    mode, target, args = req['mode'], req['target'], req['args']
    # What the imports appended to sys.argv stays appended, as in an exec'd worker.
    n = len(_ARGV_AT_IMPORT or ())
    if _ARGV_AT_IMPORT is not None and sys.argv[:n] == _ARGV_AT_IMPORT:
        args = args + sys.argv[n:]
    main = types.ModuleType('__main__')
    main.__dict__['__annotations__'] = {}
    main.__dict__['__builtins__'] = builtins
    sys.modules['__main__'] = main
    _apply_path(_first_path_entry(mode, target, req['cwd']))
    sys.orig_argv = req['orig_argv']
    if mode == 'module':
        import runpy
        sys.argv = ['-m'] + args
        runpy._run_module_as_main(target, alter_argv=True)
        return
    if mode == 'script':
        path = os.path.abspath(os.path.join(req['cwd'], target))
        from importlib.machinery import SourceFileLoader
        main.__loader__ = SourceFileLoader('__main__', path)
        main.__file__ = path
        main.__cached__ = None
        sys.argv = [target] + args
        with open(path, 'rb') as f:
            code = compile(f.read(), path, 'exec', dont_inherit=True)
    else:
        from importlib.machinery import BuiltinImporter
        main.__loader__ = BuiltinImporter
        sys.argv = ['-c'] + args
        code = compile(target, '<string>', 'exec', dont_inherit=True)
    exec(code, main.__dict__)


def _worker_main(req):
    try:
        _run(req)
    except SystemExit:
        raise  # the interpreter's own handling: the code, or the message and 1
    except BaseException as e:
        tb = _strip_own_frames(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):
            # As the interpreter does: finish, then die of SIGINT.
            import atexit, threading
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


os.set_inheritable(_FD, False)  # what a module starts at import must not hold ddprun's socket
_sock = socket.socket(fileno=_FD)
_started = time.monotonic()
try:
    _setup, _unused = _receive(_sock)
except (OSError, ValueError, KeyError, IndexError):
    os._exit(0)
if _setup is None:
    os._exit(0)
_why_not = _refusal(_setup)
_TORCH_FIXED_SEED = 'torch' in sys.modules and hasattr(sys.modules['torch'], 'initial_seed') and \
    sys.modules['torch'].initial_seed() == _TORCH_DEFAULT_SEED
_DISPOSITIONS = {s: signal.getsignal(s) for s in signal.valid_signals()}
_DISPOSITIONS = {s: h for s, h in _DISPOSITIONS.items() if h is not None}
if _why_not is not None:
    _send(_sock, {'refused': _why_not})
    os._exit(0)
# Everything the imports created goes to the collector's permanent generation, as pre-fork
# servers do (gc.freeze's documented use): the workers' collections, and above all the final one
# of their interpreter's exit (sys.exit, an exception), no longer walk the preloaded heap, which
# in a forked worker also means copying every page of it (copy-on-write). That walk was most of a
# failing forked rank's exit, and so of a restart (issue 35, item 15). Garbage of the imports goes
# first, so that nothing unreachable is kept for good; the objects themselves, their refcounts
# and their teardown at exit are unchanged.
import gc
gc.collect()
gc.freeze()
_send(_sock, {'ready': True, 'seconds': round(time.monotonic() - _started, 3)})
_request = _serve(_sock)
if _request is None:
    os._exit(0)
try:
    _become_worker(*_request)
except BaseException:
    os._exit(70)  # before the word 'set up': ddprun execs this rank (its report reads EOF)
_worker_main(_request[0])
)PY";

}  // namespace ddp::launcher
