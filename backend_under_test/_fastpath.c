/* The small-op path of the `spyre` device, compiled: `kernels._fast_call_python` in C.
 *
 * Only the CPython API is used (no torch headers): every tensor method it calls is the
 * same Python-level call the Python version makes, in the same order, so the two agree by
 * construction and this module does not depend on the torch it runs with. What it saves is
 * the interpreter: a small op on `spyre` spends about a fifth of its instructions running
 * the Python version's bytecode (benchmarks/device_small_op_instructions.py).
 *
 * Three objects:
 *   configure(**objects)   the tables and helpers of `kernels` and `memory` it works on;
 *   fast_call(op, plan, args)   `_fast_call_python`, returning `not_simple` where it declines;
 *   Kernel(op, globals, plan_for, checked_call)   `kernels.kernel_for`'s kernel: the plan is
 *       looked up on the first call and kept; a lean call without keywords goes to the
 *       `_fast_call` found in `globals` (this module's `fast_call` is called directly, any
 *       other object, a test's stand-in, through Python), everything else to checked_call.
 *
 * kernels.py keeps the Python version and uses it when this module is not built; the tests
 * run both (tests/backend_under_test/test_fast_path_compiled.py).
 */
#define PY_SSIZE_T_CLEAN
/* Raised whenever what this module offers or expects changes: kernels.py and memory.py use
 * a build only when its ABI is the one they were written for (a stale build left by an
 * earlier install is ignored, not trusted). */
#define FASTPATH_ABI 1
/* setup.py defines it: the SHA-256 of this file as it was built */
#ifndef FASTPATH_SOURCE_SHA256
#define FASTPATH_SOURCE_SHA256 ""
#endif
#include <Python.h>
#include <structmember.h>

/* memory._Live: a weak reference to a live device storage, with what its death releases. */
typedef struct {
    PyWeakReference ref;
    PyObject *ptr;
    PyObject *stored_owner;
    PyObject *alias_keys;
    PyObject *seed;
    long long charged;
} LiveObject;

static PyTypeObject LiveType;

/* --- what configure() hands over --- */
static PyObject *Tensor;          /* torch.Tensor */
static PyObject *ALIASES;         /* memory._ALIASES: alias key -> (host alias, sticks) */
static PyObject *LIVE;            /* memory._LIVE: data pointer -> live entry */
static PyObject *RESULTS;         /* kernels._RESULTS: (shape, dtype) -> result meta */
static PyObject *PENDING;         /* stats._PENDING: defaultdict(int) of op counts */
static PyObject *NOT_SIMPLE;      /* kernels._NOT_SIMPLE */
static PyObject *DEVICE;          /* memory.DEVICE */
static PyObject *read_alias_and_sticks, *with_scalars, *finish_other, *result_meta;
static PyObject *check_dtype, *to_device, *create_empty, *from_data_pointer, *register_live;
static PyObject *released_object; /* this module's released, the entries' callback */
static PyObject *register_object; /* this module's register, to call it directly */
static PyObject *register_impl(PyObject *ptr, PyObject *owner, PyObject *storage,
                               PyObject *nbytes);

static PyObject *s_is_cpu, *s_data_ptr, *s_dtype, *s_shape, *s_stride, *s_op, *s_binding;
static PyObject *s_name, *s_storage_offset, *s_is_neg, *s_is_conj, *s_untyped_storage;
static PyObject *s_swap_data_ptr, *s_seed, *s_lean, *s_fast_call, *s_op_result;
static PyObject *zero_float, *one;
static PyObject *fast_call_object; /* this module's fast_call, to recognise it in globals */

static int configured = 0;

static PyObject *
call_method0(PyObject *self, PyObject *name)
{
    return PyObject_VectorcallMethod(name, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* Truth of a method's result (-1 on error). */
static int
method_truth(PyObject *self, PyObject *name)
{
    PyObject *value = call_method0(self, name);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

static PyObject *
not_configured(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "backend_under_test._fastpath is not configured: kernels.py calls "
                    "configure() when it is imported");
    return NULL;
}

/* `table.get(key)` (a new reference), or `fn(*args)` when the table lacks the key; NULL on
 * error. Takes over `key` (which may be NULL: an error already set). */
static PyObject *
lookup_or_call(PyObject *table, PyObject *key, PyObject *fn, PyObject *const *args,
               Py_ssize_t nargs)
{
    if (key == NULL)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(table, key);
    Py_XINCREF(found); /* borrowed: owned before anything else can run */
    Py_DECREF(key);
    if (found != NULL || PyErr_Occurred())
        return found;
    return PyObject_Vectorcall(fn, args, nargs, NULL);
}

/* `value` itself when it is a tuple of `size` items; else a TypeError naming `what`. Takes
 * over `value` (NULL passes through). */
static PyObject *
expect_tuple(PyObject *value, Py_ssize_t size, const char *what)
{
    if (value == NULL || (PyTuple_Check(value) && PyTuple_GET_SIZE(value) == size))
        return value;
    Py_DECREF(value);
    PyErr_Format(PyExc_TypeError, "%s is not a %zd-tuple", what, size);
    return NULL;
}

/* The cache key of a device tensor's host alias: kernels.alias_key. */
static PyObject *
alias_key(PyObject *value)
{
    PyObject *ptr = call_method0(value, s_data_ptr);
    if (ptr == NULL)
        return NULL;
    PyObject *dtype = PyObject_GetAttr(value, s_dtype);
    if (dtype == NULL) {
        Py_DECREF(ptr);
        return NULL;
    }
    PyObject *shape = PyObject_GetAttr(value, s_shape);
    if (shape == NULL) {
        Py_DECREF(ptr);
        Py_DECREF(dtype);
        return NULL;
    }
    PyObject *stride = call_method0(value, s_stride);
    if (stride == NULL) {
        Py_DECREF(ptr);
        Py_DECREF(dtype);
        Py_DECREF(shape);
        return NULL;
    }
    PyObject *key = PyTuple_New(4);
    if (key == NULL) {
        Py_DECREF(ptr);
        Py_DECREF(dtype);
        Py_DECREF(shape);
        Py_DECREF(stride);
        return NULL;
    }
    PyTuple_SET_ITEM(key, 0, ptr);
    PyTuple_SET_ITEM(key, 1, dtype);
    PyTuple_SET_ITEM(key, 2, shape);
    PyTuple_SET_ITEM(key, 3, stride);
    return key;
}

/* Any tensor in a list or tuple argument (-1 on error). */
static int
holds_tensor(PyObject *sequence)
{
    /* length and items read again each time: __instancecheck__ is Python code */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sequence); i++) {
        PyObject *item = Py_NewRef(PySequence_Fast_ITEMS(sequence)[i]);
        int is_tensor = PyObject_IsInstance(item, Tensor);
        Py_DECREF(item);
        if (is_tensor != 0)
            return is_tensor;
    }
    return 0;
}

/* The CPU kernel on the host arguments: the plan's binding, or the overload with the
 * retry of kernels._with_scalars when it refuses a Python number. */
static PyObject *
run_on_host(PyObject *op, PyObject *binding, PyObject *host)
{
    PyObject **items = PySequence_Fast_ITEMS(host);
    Py_ssize_t n = PyList_GET_SIZE(host);
    if (binding != NULL)
        return PyObject_Vectorcall(binding, items, n, NULL);
    PyObject *overload = PyObject_GetAttr(op, s_op);
    if (overload == NULL)
        return NULL;
    PyObject *result = PyObject_Vectorcall(overload, items, n, NULL);
    Py_DECREF(overload);
    if (result != NULL || !PyErr_ExceptionMatches(PyExc_RuntimeError))
        return result;
    /* `except RuntimeError as error: _with_scalars(op, error, host_args, {})` */
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(error, traceback);
    PyObject *kwargs = PyDict_New();
    if (kwargs != NULL) {
        PyObject *handled = PyErr_GetHandledException();
        PyErr_SetHandledException(error);
        result = PyObject_CallFunctionObjArgs(with_scalars, op, error, host, kwargs, NULL);
        PyErr_SetHandledException(handled);
        Py_XDECREF(handled);
        Py_DECREF(kwargs);
    }
    Py_XDECREF(type);
    Py_XDECREF(error);
    Py_XDECREF(traceback);
    return result;
}

/* The device tensor for a fresh CPU result: adopted where it is plain, else to_device. */
static PyObject *
adopt_result(PyObject *result, PyObject *shape, PyObject *dtype, PyObject *meta)
{
    PyObject *ptr = call_method0(result, s_data_ptr);
    if (ptr == NULL)
        return NULL;
    PyObject *out = NULL;
    /* not ptr or stride != meta[0] or storage_offset or ptr in LIVE or is_neg
     * or (meta[4] and is_conj): to_device */
    int plain = PyObject_IsTrue(ptr);
    if (plain == 1) {
        PyObject *stride = call_method0(result, s_stride);
        if (stride == NULL)
            goto done;
        int differs = PyObject_RichCompareBool(stride, PyTuple_GET_ITEM(meta, 0), Py_NE);
        Py_DECREF(stride);
        plain = differs < 0 ? -1 : !differs;
    }
    if (plain == 1) {
        int offset = method_truth(result, s_storage_offset);
        plain = offset < 0 ? -1 : !offset;
    }
    if (plain == 1) {
        int known = PyDict_Contains(LIVE, ptr);
        plain = known < 0 ? -1 : !known;
    }
    if (plain == 1) {
        int negative = method_truth(result, s_is_neg);
        plain = negative < 0 ? -1 : !negative;
    }
    if (plain == 1) {
        int complex = PyObject_IsTrue(PyTuple_GET_ITEM(meta, 4));
        if (complex == 1) {
            int conj = method_truth(result, s_is_conj);
            plain = conj < 0 ? -1 : !conj;
        }
        else if (complex < 0)
            plain = -1;
    }
    if (plain < 0)
        goto done;
    if (!plain) {
        out = PyObject_CallOneArg(to_device, result);
        goto done;
    }
    /* out = _create_empty(shape, dtype); its storage takes over the result's bytes */
    PyObject *nbytes = PyTuple_GET_ITEM(meta, 5);
    PyObject *args[4] = {shape, dtype, NULL, NULL};
    out = PyObject_Vectorcall(create_empty, args, 2, NULL);
    if (out == NULL)
        goto done;
    PyObject *storage = call_method0(out, s_untyped_storage);
    if (storage == NULL)
        goto fail;
    args[0] = ptr;
    args[1] = DEVICE;
    args[2] = nbytes;
    PyObject *device_storage = PyObject_Vectorcall(from_data_pointer, args, 3, NULL);
    if (device_storage == NULL) {
        Py_DECREF(storage);
        goto fail;
    }
    PyObject *swap_args[2] = {storage, device_storage};
    PyObject *swapped = PyObject_VectorcallMethod(s_swap_data_ptr, swap_args, 2, NULL);
    Py_DECREF(device_storage);
    if (swapped == NULL) {
        Py_DECREF(storage);
        goto fail;
    }
    Py_DECREF(swapped);
    /* _register(ptr, None, storage, nbytes).seed = result */
    args[0] = ptr;
    args[1] = Py_None;
    args[2] = storage;
    args[3] = nbytes;
    PyObject *entry = register_live == register_object
                          ? register_impl(ptr, Py_None, storage, nbytes)
                          : PyObject_Vectorcall(register_live, args, 4, NULL);
    Py_DECREF(storage);
    if (entry == NULL)
        goto fail;
    int set = 0;
    if (PyObject_TypeCheck(entry, &LiveType))
        Py_XSETREF(((LiveObject *)entry)->seed, Py_NewRef(result));
    else
        set = PyObject_SetAttr(entry, s_seed, result);
    Py_DECREF(entry);
    if (set < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_DECREF(ptr);
    return out;
}

/* `_PENDING_OPS[(plan.name, sticks, elements, 0.0)] += 1` (stats.record_op). */
static int
count_op(PyObject *name, PyObject *sticks, PyObject *elements)
{
    PyObject *key = PyTuple_Pack(4, name, sticks, elements, zero_float);
    if (key == NULL)
        return -1;
    int status = -1;
    /* a defaultdict(int): a key it does not hold counts from 0 */
    PyObject *count = PyDict_GetItemWithError(PENDING, key);
    if (count != NULL || !PyErr_Occurred()) {
        PyObject *next = count == NULL ? Py_NewRef(one) : PyNumber_Add(count, one);
        if (next != NULL) {
            status = PyDict_SetItem(PENDING, key, next);
            Py_DECREF(next);
        }
    }
    Py_DECREF(key);
    return status;
}

/* The last result shape and dtype a kernel saw, with their meta (kernels._result_meta, a
 * function of the two): most calls of an op give the shape of the call before. */
typedef struct {
    PyObject *shape;
    PyObject *dtype;
    PyObject *meta;
} MetaCache;

static void
meta_cache_clear(MetaCache *cache)
{
    Py_CLEAR(cache->shape);
    Py_CLEAR(cache->dtype);
    Py_CLEAR(cache->meta);
}

/* The meta of a result's shape and dtype (a new reference): the cache, then
 * kernels._RESULTS, then kernels._result_meta. */
static PyObject *
meta_for(PyObject *shape, PyObject *dtype, MetaCache *cache)
{
    if (cache != NULL && cache->meta != NULL && cache->dtype == dtype) {
        int same = PyObject_RichCompareBool(shape, cache->shape, Py_EQ);
        if (same < 0)
            return NULL;
        if (same)
            return Py_NewRef(cache->meta);
    }
    PyObject *call[2] = {shape, dtype};
    PyObject *meta = expect_tuple(
        lookup_or_call(RESULTS, PyTuple_Pack(2, shape, dtype), result_meta, call, 2), 6,
        "a result meta entry");
    if (meta == NULL)
        return NULL;
    if (cache != NULL) {
        Py_XSETREF(cache->shape, Py_NewRef(shape));
        Py_XSETREF(cache->dtype, Py_NewRef(dtype));
        Py_XSETREF(cache->meta, Py_NewRef(meta));
    }
    return meta;
}

/* The small-op path (kernels._fast_call_python); a new reference, NOT_SIMPLE included.
 * `binding` (plan.binding, NULL for None) and `name` (plan.name) come with the plan;
 * `cache` is the calling kernel's (NULL: none). */
static PyObject *
fast_call_impl(PyObject *op, PyObject *plan, PyObject *binding, PyObject *name,
               PyObject *args, MetaCache *cache)
{
    if (!configured)
        return not_configured();
    if (!PyTuple_Check(args)) {
        PyErr_Format(PyExc_TypeError, "fast_call: args must be a tuple, not %.100s",
                     Py_TYPE(args)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *host = PyList_New(n);
    if (host == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(args, i);
        Py_INCREF(value);
        PyList_SET_ITEM(host, i, value);
    }
    PyObject *out = NULL, *result = NULL, *sticks_object = NULL;
    long long sticks = 0;
    Py_XINCREF(binding);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(args, i);
        int is_tensor = PyObject_IsInstance(value, Tensor);
        if (is_tensor < 0)
            goto done;
        if (is_tensor) {
            PyObject *is_cpu = PyObject_GetAttr(value, s_is_cpu);
            if (is_cpu == NULL)
                goto done;
            int cpu = PyObject_IsTrue(is_cpu);
            Py_DECREF(is_cpu);
            if (cpu < 0)
                goto done;
            if (cpu)
                continue;
            /* (alias, sticks): the cache, or kernels.read_alias_and_sticks */
            PyObject *known = expect_tuple(
                lookup_or_call(ALIASES, alias_key(value), read_alias_and_sticks, &value, 1), 2,
                "a host alias entry");
            if (known == NULL)
                goto done;
            PyObject *alias = PyTuple_GET_ITEM(known, 0);
            Py_INCREF(alias);
            PyList_SetItem(host, i, alias); /* steals alias, drops the device tensor */
            long long more = PyLong_AsLongLong(PyTuple_GET_ITEM(known, 1));
            Py_DECREF(known);
            if (more == -1 && PyErr_Occurred())
                goto done;
            sticks += more;
        }
        else if (PyList_Check(value) || PyTuple_Check(value)) {
            int tensors = PySequence_Fast_GET_SIZE(value) ? holds_tensor(value) : 0;
            if (tensors < 0)
                goto done;
            if (tensors) {
                out = Py_NewRef(NOT_SIMPLE);
                goto done;
            }
            Py_CLEAR(binding); /* the binding is checked for tensors only */
        }
        else
            Py_CLEAR(binding);
    }
    result = run_on_host(op, binding, host);
    if (result == NULL)
        goto done;
    sticks_object = PyLong_FromLongLong(sticks);
    if (sticks_object == NULL)
        goto done;
    if (Py_TYPE(result) != (PyTypeObject *)Tensor) {
        PyObject *call[5] = {plan, args, host, result, sticks_object};
        out = PyObject_Vectorcall(finish_other, call, 5, NULL);
        goto done;
    }
    PyObject *dtype = PyObject_GetAttr(result, s_dtype);
    if (dtype == NULL)
        goto done;
    PyObject *shape = PyObject_GetAttr(result, s_shape);
    if (shape == NULL) {
        Py_DECREF(dtype);
        goto done;
    }
    PyObject *total = NULL;
    PyObject *meta = meta_for(shape, dtype, cache);
    if (meta == NULL)
        goto result_done;
    int refused = PyObject_IsTrue(PyTuple_GET_ITEM(meta, 3));
    if (refused < 0)
        goto result_done;
    if (refused) {
        PyObject *call[2] = {dtype, s_op_result};
        PyObject *checked = PyObject_Vectorcall(check_dtype, call, 2, NULL);
        if (checked == NULL)
            goto result_done;
        Py_DECREF(checked);
    }
    PyObject *device_tensor = adopt_result(result, shape, dtype, meta);
    if (device_tensor == NULL)
        goto result_done;
    total = PyNumber_Add(sticks_object, PyTuple_GET_ITEM(meta, 1));
    if (total == NULL || count_op(name, total, PyTuple_GET_ITEM(meta, 2)) < 0) {
        Py_DECREF(device_tensor);
        goto result_done;
    }
    out = device_tensor;
result_done:
    Py_XDECREF(total);
    Py_XDECREF(meta);
    Py_DECREF(shape);
    Py_DECREF(dtype);
done:
    Py_XDECREF(sticks_object);
    Py_XDECREF(result);
    Py_XDECREF(binding);
    Py_DECREF(host);
    return out;
}

static PyObject *
fast_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "fast_call(op, plan, args) takes 3 arguments, got %zd",
                     nargs);
        return NULL;
    }
    PyObject *plan = args[1];
    PyObject *binding = PyObject_GetAttr(plan, s_binding);
    if (binding == NULL)
        return NULL;
    PyObject *name = PyObject_GetAttr(plan, s_name);
    if (name == NULL) {
        Py_DECREF(binding);
        return NULL;
    }
    PyObject *out = fast_call_impl(args[0], plan, binding == Py_None ? NULL : binding, name,
                                   args[2], NULL);
    Py_DECREF(binding);
    Py_DECREF(name);
    return out;
}

static int take(PyObject *objects, const char *name, PyObject **slot);

/* --- device memory: memory.MemoryCounters, memory._Live, register and _released --- */

/* memory.MemoryCounters: allocator counters, in bytes rounded up to whole sticks. */
typedef struct {
    PyObject_HEAD
    long long allocated;
    long long peak;
    long long allocations;
    long long frees;
} CountersObject;

static PyObject *
counters_repr(CountersObject *self)
{
    return PyUnicode_FromFormat("MemoryCounters(allocated=%lld, peak=%lld, allocations=%lld, "
                                "frees=%lld)",
                                self->allocated, self->peak, self->allocations, self->frees);
}

static PyMemberDef counters_members[] = {
    {"allocated", T_LONGLONG, offsetof(CountersObject, allocated), 0, NULL},
    {"peak", T_LONGLONG, offsetof(CountersObject, peak), 0, NULL},
    {"allocations", T_LONGLONG, offsetof(CountersObject, allocations), 0, NULL},
    {"frees", T_LONGLONG, offsetof(CountersObject, frees), 0, NULL},
    {NULL},
};

static PyTypeObject CountersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backend_under_test._fastpath.MemoryCounters",
    .tp_doc = "Allocator counters, in bytes rounded up to whole sticks (memory.MemoryCounters).",
    .tp_basicsize = sizeof(CountersObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_repr = (reprfunc)counters_repr,
    .tp_members = counters_members,
};


static PyObject *
live_owner(LiveObject *self, void *closure)
{
    if (self->stored_owner != NULL && self->stored_owner != Py_None)
        return Py_NewRef(self->stored_owner);
    if (self->seed == NULL || self->seed == Py_None) {
        PyErr_SetString(PyExc_AssertionError, "a live entry has an owner or a seed");
        return NULL;
    }
    return call_method0(self->seed, s_untyped_storage);
}

static int
live_traverse(LiveObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->ptr);
    Py_VISIT(self->stored_owner);
    Py_VISIT(self->alias_keys);
    Py_VISIT(self->seed);
    return _PyWeakref_RefType.tp_traverse((PyObject *)self, visit, arg);
}

static int
live_clear(LiveObject *self)
{
    Py_CLEAR(self->ptr);
    Py_CLEAR(self->stored_owner);
    Py_CLEAR(self->alias_keys);
    Py_CLEAR(self->seed);
    return _PyWeakref_RefType.tp_clear((PyObject *)self);
}

static void
live_dealloc(LiveObject *self)
{
    PyObject_GC_UnTrack(self);
    /* off the storage's list first: what the fields free cannot reach a half-freed entry */
    _PyWeakref_RefType.tp_clear((PyObject *)self);
    Py_CLEAR(self->ptr);
    Py_CLEAR(self->stored_owner);
    Py_CLEAR(self->alias_keys);
    Py_CLEAR(self->seed);
    _PyWeakref_RefType.tp_dealloc((PyObject *)self);
}

static PyMemberDef live_members[] = {
    {"ptr", T_OBJECT, offsetof(LiveObject, ptr), 0, "the data pointer: the key in memory._LIVE"},
    {"stored_owner", T_OBJECT, offsetof(LiveObject, stored_owner), 0,
     "the CPU storage holding the bytes, or None when the seed holds them"},
    {"charged", T_LONGLONG, offsetof(LiveObject, charged), 0, "bytes charged (whole sticks)"},
    {"alias_keys", T_OBJECT, offsetof(LiveObject, alias_keys), 0,
     "the host-alias cache keys made over these bytes, or None"},
    {"seed", T_OBJECT, offsetof(LiveObject, seed), 0,
     "the CPU result the device storage adopted, or None"},
    {NULL},
};

static PyGetSetDef live_getset[] = {
    {"owner", (getter)live_owner, NULL, "the CPU storage holding the bytes", NULL},
    {NULL},
};

static PyTypeObject LiveType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backend_under_test._fastpath.Live",
    .tp_doc = "Live(storage, callback): memory._Live, a live device storage's entry.",
    .tp_basicsize = sizeof(LiveObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)live_dealloc,
    .tp_traverse = (traverseproc)live_traverse,
    .tp_clear = (inquiry)live_clear,
    .tp_members = live_members,
    .tp_getset = live_getset,
};

static CountersObject *COUNTERS;  /* memory.COUNTERS */
static PyObject *MEMORY_LIVE;     /* memory._LIVE */
static PyObject *MEMORY_ALIASES;  /* memory._ALIASES */
static long long stick_bytes;

static PyObject *
memory_not_configured(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "backend_under_test._fastpath: configure_memory() was not called");
    return NULL;
}

static PyObject *
register_impl(PyObject *ptr, PyObject *owner, PyObject *storage, PyObject *nbytes)
{
    if (COUNTERS == NULL)
        return memory_not_configured();
    long long size = PyLong_AsLongLong(nbytes);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (size < 0) {
        PyErr_Format(PyExc_ValueError, "register: negative size %lld", size);
        return NULL;
    }
    PyObject *args = PyTuple_Pack(2, storage, released_object);
    if (args == NULL)
        return NULL;
    LiveObject *entry = (LiveObject *)LiveType.tp_new(&LiveType, args, NULL);
    Py_DECREF(args);
    if (entry == NULL)
        return NULL;
    entry->ptr = Py_NewRef(ptr);
    entry->stored_owner = Py_NewRef(owner);
    /* whole sticks: -(-nbytes // STICK_BYTES) * STICK_BYTES */
    long long charged = entry->charged = (size + stick_bytes - 1) / stick_bytes * stick_bytes;
    if (PyDict_SetItem(MEMORY_LIVE, ptr, (PyObject *)entry) < 0) {
        Py_DECREF(entry);
        return NULL;
    }
    CountersObject *counters = COUNTERS;
    counters->allocations += 1;
    long long allocated = counters->allocated += charged;
    if (allocated > counters->peak)
        counters->peak = allocated;
    return (PyObject *)entry;
}

static PyObject *
register_live_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError,
                     "register(ptr, owner, storage, nbytes) takes 4 arguments, got %zd", nargs);
        return NULL;
    }
    return register_impl(args[0], args[1], args[2], args[3]);
}

/* The weak reference's callback: the device storage died; free its bytes and aliases.
 * CPython calls a lone callback without a reference of its own to the entry, and the entry
 * may be the live table's last: it is held for the length of the call. */
static PyObject *
released(PyObject *module, PyObject *object)
{
    if (COUNTERS == NULL)
        return memory_not_configured();
    if (!PyObject_TypeCheck(object, &LiveType)) {
        PyErr_Format(PyExc_TypeError, "released: expected a Live entry, not %.100s",
                     Py_TYPE(object)->tp_name);
        return NULL;
    }
    LiveObject *entry = (LiveObject *)Py_NewRef(object);
    PyObject *result = NULL;
    PyObject *ptr = entry->ptr;
    if (ptr != NULL) {
        /* a newer storage may have taken the pointer meanwhile */
        Py_INCREF(ptr);
        PyObject *current = PyDict_GetItemWithError(MEMORY_LIVE, ptr);
        int failed = current == NULL && PyErr_Occurred();
        if (current == object)
            failed = PyDict_DelItem(MEMORY_LIVE, ptr) < 0;
        Py_DECREF(ptr);
        if (failed)
            goto done;
    }
    PyObject *keys = entry->alias_keys;
    if (keys != NULL && keys != Py_None) {
        PyObject *fast = PySequence_Fast(keys, "alias_keys is not a sequence");
        if (fast == NULL)
            goto done;
        /* the length is read again each time, as a Python loop over a list does */
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
            PyObject *key = Py_NewRef(PySequence_Fast_GET_ITEM(fast, i));
            int deleted = PyDict_DelItem(MEMORY_ALIASES, key); /* _ALIASES.pop(key, None) */
            Py_DECREF(key);
            if (deleted < 0) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
                    Py_DECREF(fast);
                    goto done;
                }
                PyErr_Clear();
            }
        }
        Py_DECREF(fast);
    }
    COUNTERS->allocated -= entry->charged;
    COUNTERS->frees += 1;
    result = Py_NewRef(Py_None);
done:
    Py_DECREF(entry);
    return result;
}

static PyObject *
configure_memory(PyObject *module, PyObject *args, PyObject *kwargs)
{
    PyObject *counters = NULL, *sticks = NULL;
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL) {
        PyErr_SetString(PyExc_TypeError, "configure_memory takes keyword arguments only");
        return NULL;
    }
    if (take(kwargs, "counters", &counters) < 0 || take(kwargs, "live", &MEMORY_LIVE) < 0
        || take(kwargs, "aliases", &MEMORY_ALIASES) < 0
        || take(kwargs, "stick_bytes", &sticks) < 0)
        goto fail;
    stick_bytes = PyLong_AsLongLong(sticks);
    Py_CLEAR(sticks);
    if (stick_bytes <= 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "configure_memory: stick_bytes must be positive");
        goto fail;
    }
    if (!PyObject_TypeCheck(counters, &CountersType) || !PyDict_Check(MEMORY_LIVE)
        || !PyDict_Check(MEMORY_ALIASES)) {
        PyErr_SetString(PyExc_TypeError, "configure_memory: counters must be this module's "
                                         "MemoryCounters; live and aliases dicts");
        goto fail;
    }
    Py_XSETREF(COUNTERS, (CountersObject *)counters);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(counters);
    Py_XDECREF(sticks);
    return NULL;
}

/* --- configure --- */

static int
take(PyObject *objects, const char *name, PyObject **slot)
{
    PyObject *value = PyDict_GetItemString(objects, name);
    if (value == NULL) {
        PyErr_Format(PyExc_TypeError, "configure: missing %s", name);
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(*slot, value);
    return 0;
}

static PyObject *
configure(PyObject *module, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL) {
        PyErr_SetString(PyExc_TypeError, "configure takes keyword arguments only");
        return NULL;
    }
    if (take(kwargs, "Tensor", &Tensor) < 0 || take(kwargs, "aliases", &ALIASES) < 0
        || take(kwargs, "live", &LIVE) < 0 || take(kwargs, "results", &RESULTS) < 0
        || take(kwargs, "pending", &PENDING) < 0 || take(kwargs, "not_simple", &NOT_SIMPLE) < 0
        || take(kwargs, "device", &DEVICE) < 0
        || take(kwargs, "read_alias_and_sticks", &read_alias_and_sticks) < 0
        || take(kwargs, "with_scalars", &with_scalars) < 0
        || take(kwargs, "finish_other", &finish_other) < 0
        || take(kwargs, "result_meta", &result_meta) < 0
        || take(kwargs, "check_dtype", &check_dtype) < 0
        || take(kwargs, "to_device", &to_device) < 0
        || take(kwargs, "create_empty", &create_empty) < 0
        || take(kwargs, "from_data_pointer", &from_data_pointer) < 0
        || take(kwargs, "register", &register_live) < 0)
        return NULL;
    if (!PyType_Check(Tensor) || !PyDict_Check(ALIASES) || !PyDict_Check(LIVE)
        || !PyDict_Check(RESULTS) || !PyDict_Check(PENDING)) {
        PyErr_SetString(PyExc_TypeError, "configure: Tensor must be a type; aliases, live, "
                                         "results and pending dicts");
        return NULL;
    }
    configured = 1;
    Py_RETURN_NONE;
}

/* --- Kernel: kernels.kernel_for's kernel --- */

typedef struct {
    PyObject_HEAD
    PyObject *op;
    PyObject *globals;      /* kernels' globals: `_fast_call` is looked up per call */
    PyObject *plan_for;
    PyObject *checked_call;
    PyObject *plan;         /* NULL until the first call; then its fields below */
    int lean;
    PyObject *binding;      /* plan.binding, NULL for None */
    PyObject *op_name;      /* plan.name */
    MetaCache meta_cache;
    PyObject *name;
} KernelObject;

/* Called with a tuple and a dict, as the dispatcher's Python kernel holder calls it (through
 * PyObject_Call): the tuple is the op's positional arguments as they are, no copy. */
static PyObject *
kernel_call(KernelObject *self, PyObject *positional, PyObject *kwargs)
{
    if (self->plan == NULL) {
        PyObject *plan = PyObject_CallOneArg(self->plan_for, self->op);
        if (plan == NULL)
            return NULL;
        /* OpPlan is frozen: what the small-op path reads of it is read once */
        PyObject *lean = PyObject_GetAttr(plan, s_lean);
        int truth = lean == NULL ? -1 : PyObject_IsTrue(lean);
        Py_XDECREF(lean);
        PyObject *binding = truth < 0 ? NULL : PyObject_GetAttr(plan, s_binding);
        PyObject *op_name = binding == NULL ? NULL : PyObject_GetAttr(plan, s_name);
        if (op_name == NULL) {
            Py_XDECREF(binding);
            Py_DECREF(plan);
            return NULL;
        }
        if (binding == Py_None)
            Py_CLEAR(binding);
        self->lean = truth;
        Py_XSETREF(self->binding, binding);
        Py_XSETREF(self->op_name, op_name);
        Py_XSETREF(self->plan, plan);
    }
    PyObject *plan = Py_NewRef(self->plan);
    PyObject *out = NULL;
    Py_INCREF(positional);
    int has_kwargs = kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0;
    if (self->lean && !has_kwargs) {
        PyObject *fast = PyDict_GetItemWithError(self->globals, s_fast_call);
        if (fast == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_NameError, "kernels._fast_call is not defined");
            goto done;
        }
        if (fast == fast_call_object)
            out = fast_call_impl(self->op, plan, self->binding, self->op_name, positional,
                                 &self->meta_cache);
        else {
            Py_INCREF(fast);
            PyObject *call[3] = {self->op, plan, positional};
            out = PyObject_Vectorcall(fast, call, 3, NULL);
            Py_DECREF(fast);
        }
        if (out == NULL || out != NOT_SIMPLE)
            goto done;
        Py_CLEAR(out);
    }
    /* _checked_call(op, plan, args, kwargs): a dict of its own, as `**kwargs` gives */
    PyObject *own = kwargs == NULL ? PyDict_New() : PyDict_Copy(kwargs);
    if (own == NULL)
        goto done;
    PyObject *call[4] = {self->op, plan, positional, own};
    out = PyObject_Vectorcall(self->checked_call, call, 4, NULL);
    Py_DECREF(own);
done:
    Py_DECREF(positional);
    Py_DECREF(plan);
    return out;
}

static PyObject *
kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *op, *globals, *plan_for, *checked_call, *name;
    static char *keywords[] = {"op", "globals", "plan_for", "checked_call", "name", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OOU:Kernel", keywords, &op,
                                     &PyDict_Type, &globals, &plan_for, &checked_call, &name))
        return NULL;
    KernelObject *self = (KernelObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->op = Py_NewRef(op);
    self->globals = Py_NewRef(globals);
    self->plan_for = Py_NewRef(plan_for);
    self->checked_call = Py_NewRef(checked_call);
    self->name = Py_NewRef(name);
    self->plan = self->binding = self->op_name = NULL;
    self->lean = 0;
    return (PyObject *)self;
}

static int
kernel_traverse(KernelObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->op);
    Py_VISIT(self->globals);
    Py_VISIT(self->plan_for);
    Py_VISIT(self->checked_call);
    Py_VISIT(self->plan);
    Py_VISIT(self->binding);
    Py_VISIT(self->op_name);
    Py_VISIT(self->meta_cache.shape);
    Py_VISIT(self->meta_cache.dtype);
    Py_VISIT(self->meta_cache.meta);
    Py_VISIT(self->name);
    return 0;
}

static int
kernel_clear(KernelObject *self)
{
    Py_CLEAR(self->op);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->plan_for);
    Py_CLEAR(self->checked_call);
    Py_CLEAR(self->plan);
    Py_CLEAR(self->binding);
    Py_CLEAR(self->op_name);
    meta_cache_clear(&self->meta_cache);
    Py_CLEAR(self->name);
    return 0;
}

static void
kernel_dealloc(KernelObject *self)
{
    PyObject_GC_UnTrack(self);
    kernel_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
kernel_repr(KernelObject *self)
{
    return PyUnicode_FromFormat("<spyre kernel %U>", self->name);
}

static PyMemberDef kernel_members[] = {
    {"__name__", T_OBJECT, offsetof(KernelObject, name), READONLY, NULL},
    {"__qualname__", T_OBJECT, offsetof(KernelObject, name), READONLY, NULL},
    {"op", T_OBJECT, offsetof(KernelObject, op), READONLY, "the overload it runs"},
    {"plan", T_OBJECT, offsetof(KernelObject, plan), READONLY,
     "the overload's OpPlan (None before the first call)"},
    {NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "backend_under_test._fastpath.Kernel",
    .tp_doc = "Kernel(op, globals, plan_for, checked_call, name): one overload's spyre kernel.",
    .tp_basicsize = sizeof(KernelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = kernel_new,
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_traverse = (traverseproc)kernel_traverse,
    .tp_clear = (inquiry)kernel_clear,
    .tp_repr = (reprfunc)kernel_repr,
    .tp_call = (ternaryfunc)kernel_call,
    .tp_members = kernel_members,
};

/* --- the module --- */

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**objects): the tables and helpers the small-op path works on."},
    {"fast_call", (PyCFunction)(void (*)(void))fast_call, METH_FASTCALL,
     "fast_call(op, plan, args): kernels._fast_call_python, compiled."},
    {"configure_memory", (PyCFunction)(void (*)(void))configure_memory,
     METH_VARARGS | METH_KEYWORDS,
     "configure_memory(**objects): the live table, the _Live type and the counters."},
    {"register", (PyCFunction)(void (*)(void))register_live_entry, METH_FASTCALL,
     "register(ptr, owner, storage, nbytes): memory.register, compiled."},
    {"released", (PyCFunction)released, METH_O,
     "released(entry): memory._released, compiled (the live entries' callback)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "backend_under_test._fastpath",
    "The small-op path of the spyre device, compiled (see _fastpath.c).", -1, methods,
};

#define INTERN(slot, text)                                                                   \
    if ((slot = PyUnicode_InternFromString(text)) == NULL)                                   \
        return NULL;

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    INTERN(s_is_cpu, "is_cpu");
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_dtype, "dtype");
    INTERN(s_shape, "shape");
    INTERN(s_stride, "stride");
    INTERN(s_op, "_op");
    INTERN(s_binding, "binding");
    INTERN(s_name, "name");
    INTERN(s_storage_offset, "storage_offset");
    INTERN(s_is_neg, "is_neg");
    INTERN(s_is_conj, "is_conj");
    INTERN(s_untyped_storage, "untyped_storage");
    INTERN(s_swap_data_ptr, "_swap_data_ptr_");
    INTERN(s_seed, "seed");
    INTERN(s_lean, "lean");
    INTERN(s_fast_call, "_fast_call");
    INTERN(s_op_result, "op result");
    if ((zero_float = PyFloat_FromDouble(0.0)) == NULL || (one = PyLong_FromLong(1)) == NULL)
        return NULL;
    LiveType.tp_base = &_PyWeakref_RefType;
    if (PyType_Ready(&KernelType) < 0 || PyType_Ready(&CountersType) < 0
        || PyType_Ready(&LiveType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Kernel", (PyObject *)&KernelType) < 0
        || PyModule_AddObjectRef(module, "MemoryCounters", (PyObject *)&CountersType) < 0
        || PyModule_AddObjectRef(module, "Live", (PyObject *)&LiveType) < 0
        || PyModule_AddIntConstant(module, "ABI", FASTPATH_ABI) < 0
        || PyModule_AddStringConstant(module, "SOURCE_SHA256", FASTPATH_SOURCE_SHA256) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    fast_call_object = PyObject_GetAttrString(module, "fast_call");
    released_object = PyObject_GetAttrString(module, "released");
    register_object = PyObject_GetAttrString(module, "register");
    if (fast_call_object == NULL || released_object == NULL || register_object == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
