/* specproxy.core._speedups: the proxy's commonest loops, in C.
 *
 * ChunkWriter is proxy.client_answer.ChunkForwarder's commonest call (an upstream read
 * written to the client as one HTTP chunk); every other case is handed to the
 * ChunkForwarder it was made for, which stays the reference.
 *
 * take_plain_chat is the plain-chat run reader (core/protocol/choices.py take_plain_run), with
 * the same result for every input; the Python loop stays the reference and the
 * fallback (tests/core/test_speedups.py holds the two to each other).
 *
 * Most events of a stream differ from the one before only in their content string: an
 * SGLang chunk is {"id":..,"created":..,"choices":[{"index":0,"delta":{..,"content":"<text>"},
 * ..}]} with everything but <text> the same. So an event is parsed (by the loads function
 * given, orjson.loads) and checked as the Python loop does only until one plain event with
 * content has been; that event becomes the template: the text before its content's string
 * token (prefix) and after it (suffix). A later event that is prefix + a JSON string token
 * + suffix is then the template with another content, and is read without a parse: its
 * content is the token's value.
 *
 * Why that is exact: the template is proven first. The content key must occur once
 * ("content":" once in the text), and the probe prefix + "x" + suffix (or "y" when the
 * content is "x") must parse to a plain event whose content is "x". The lexer's state
 * after the identical prefix is the same for every event; the probe shows it is where a
 * value is expected and that this value is choices[0].delta.content (with duplicate keys,
 * the one that counts). Any other string token in that place then parses to the probe's
 * tree with that one value changed: the same checks pass, and the content is the token's
 * value. A token is only taken whole: from its opening quote to the first quote not
 * escaped, with no control character or surrogate in it; one with an escape is decoded
 * by loads (which rejects a bad escape: the event then takes the parse, and fails as the
 * Python loop's does).
 *
 * hdr_add and bucket_counts are the per-token loops of a record's two ITL histograms
 * (core.measurement.histogram.LatencyHistogram.record_many, proxy.records._observe_many): they take
 * the common case (a list of int pairs in range) and return None for anything else,
 * which the Python loops, the reference, then take.
 *
 * cut_chunk_arrays is core.records.chunk_span.cut_chunk_arrays (the report's records scan) for a
 * line whose first chunk gap is a plain integer, and None for any other line, which the
 * Python function then takes. window_runs is report.timeline's split of a straddling
 * request's chunk tokens over the throughput windows, for such a line, with None for
 * any other.
 *
 * Optional: setup.py builds it when a C compiler is there, and core.protocol.events falls
 * back to the Python loop when it is not importable (or SPECPROXY_PURE_PYTHON is set).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>

static PyObject *k_usage, *k_sglext, *k_timings, *k_choices, *k_delta, *k_finish_reason,
    *k_token_ids, *k_logprobs, *k_index, *k_reasoning_content, *k_reasoning, *k_tool_calls,
    *k_content;

/* dict[key] is present and not None: 1; absent or None: 0; error: -1 */
static int
present(PyObject *dict, PyObject *key)
{
    PyObject *value = PyDict_GetItemWithError(dict, key); /* borrowed */
    if (value == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    return value != Py_None;
}

/* 1 when the event whose parsed data is obj is a plain chat event (protocol.py's
 * checks, in order), with *content set (borrowed) to its non-empty string content or
 * NULL; 0 when it is not plain; -1 on error. */
static int
plain(PyObject *obj, PyObject **content)
{
    int r;
    *content = NULL;
    if (!PyDict_CheckExact(obj)) {
        return 0;
    }
    if ((r = present(obj, k_usage)) != 0 || (r = present(obj, k_sglext)) != 0 ||
        (r = present(obj, k_timings)) != 0) {
        return r < 0 ? -1 : 0;
    }
    PyObject *choices = PyDict_GetItemWithError(obj, k_choices);
    if (choices == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyList_CheckExact(choices) || PyList_GET_SIZE(choices) != 1) {
        return 0;
    }
    PyObject *choice = PyList_GET_ITEM(choices, 0);
    if (!PyDict_CheckExact(choice)) {
        return 0;
    }
    /* _plain_delta */
    PyObject *delta = PyDict_GetItemWithError(choice, k_delta);
    if (delta == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyDict_CheckExact(delta)) {
        return 0;
    }
    if ((r = present(choice, k_finish_reason)) != 0) {
        return r < 0 ? -1 : 0;
    }
    if ((r = PyDict_Contains(choice, k_token_ids)) != 0) {
        return r < 0 ? -1 : 0;
    }
    if ((r = present(choice, k_logprobs)) != 0) {
        return r < 0 ? -1 : 0;
    }
    PyObject *index = PyDict_GetItemWithError(choice, k_index);
    if (index == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (index != NULL && PyLong_CheckExact(index)) { /* int_or_none(...) is truthy */
        if ((r = PyObject_IsTrue(index)) != 0) {
            return r < 0 ? -1 : 0;
        }
    }
    if ((r = present(delta, k_reasoning_content)) != 0 || (r = present(delta, k_reasoning)) != 0) {
        return r < 0 ? -1 : 0;
    }
    PyObject *calls = PyDict_GetItemWithError(delta, k_tool_calls);
    if (calls == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (calls != NULL && (r = PyObject_IsTrue(calls)) != 0) {
        return r < 0 ? -1 : 0;
    }
    PyObject *text = PyDict_GetItemWithError(delta, k_content);
    if (text == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (text != NULL && PyUnicode_CheckExact(text) && PyUnicode_GET_LENGTH(text) > 0) {
        *content = text;
    }
    return 1;
}

/* A proven template (see the top of this file), or prefix == NULL. */
typedef struct {
    PyObject *prefix;
    PyObject *suffix;
    int failed; /* templates that could not be proven in this call */
} Template;

#define MAX_FAILED_TEMPLATES 2

static PyObject *k_content_key; /* "content":" */

/* The index of the quote that ends the JSON string token opening at data[open], or -1
 * when there is none or it holds a control character or a surrogate; *escaped is set
 * when it holds a backslash (the character after one is not looked at: loads checks it). */
static Py_ssize_t
token_end(PyObject *data, Py_ssize_t open, int *escaped)
{
    int kind = PyUnicode_KIND(data);
    const void *d = PyUnicode_DATA(data);
    Py_ssize_t n = PyUnicode_GET_LENGTH(data);
    *escaped = 0;
    for (Py_ssize_t q = open + 1; q < n; q++) {
        Py_UCS4 c = PyUnicode_READ(kind, d, q);
        if (c == '"') {
            return q;
        }
        if (c == '\\') {
            *escaped = 1;
            q++;
        } else if (c < 0x20 || (c >= 0xD800 && c <= 0xDFFF)) {
            return -1;
        }
    }
    return -1;
}

/* data read by the template: 1 when it is prefix + a string token + suffix, with *content
 * its value (a new reference; NULL when empty); 0 when it is not; -1 on error. */
static int
match(Template *tp, PyObject *data, PyObject *loads, PyObject *decode_error, PyObject **content)
{
    *content = NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(data), p = PyUnicode_GET_LENGTH(tp->prefix),
               s = PyUnicode_GET_LENGTH(tp->suffix);
    if (n < p + 2 + s || PyUnicode_READ_CHAR(data, p) != '"') {
        return 0;
    }
    Py_ssize_t r = PyUnicode_Tailmatch(data, tp->prefix, 0, p, -1);
    if (r != 1) {
        return r < 0 ? -1 : 0;
    }
    int escaped;
    Py_ssize_t q = token_end(data, p, &escaped);
    if (q < 0 || n - (q + 1) != s) {
        return 0;
    }
    r = PyUnicode_Tailmatch(data, tp->suffix, q + 1, n, 1);
    if (r != 1) {
        return r < 0 ? -1 : 0;
    }
    if (q == p + 1) {
        return 1; /* "" */
    }
    if (!escaped) {
        *content = PyUnicode_Substring(data, p + 1, q);
        return *content == NULL ? -1 : 1;
    }
    PyObject *token = PyUnicode_Substring(data, p, q + 1);
    if (token == NULL) {
        return -1;
    }
    PyObject *value = PyObject_CallOneArg(loads, token);
    Py_DECREF(token);
    if (value == NULL) {
        if (PyErr_ExceptionMatches(decode_error)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    if (!PyUnicode_CheckExact(value)) {
        Py_DECREF(value);
        return 0;
    }
    if (PyUnicode_GET_LENGTH(value) == 0) {
        Py_DECREF(value);
        return 1;
    }
    *content = value;
    return 1;
}

static void
forget(Template *tp)
{
    Py_CLEAR(tp->prefix);
    Py_CLEAR(tp->suffix);
}

/* Make data (a plain event whose content is the non-empty string content) the template,
 * if it proves to be one: 0 (proven or not), -1 on error. */
static int
prove(Template *tp, PyObject *data, PyObject *content, PyObject *loads, PyObject *decode_error)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(data);
    Py_ssize_t at = PyUnicode_Find(data, k_content_key, 0, n, 1);
    if (at == -2) {
        return -1;
    }
    if (at == -1) {
        tp->failed++;
        return 0;
    }
    Py_ssize_t again = PyUnicode_Find(data, k_content_key, at + 1, n, 1);
    if (again == -2) {
        return -1;
    }
    int escaped;
    Py_ssize_t open = at + PyUnicode_GET_LENGTH(k_content_key) - 1;
    Py_ssize_t q = again == -1 ? token_end(data, open, &escaped) : -1;
    if (q < 0) {
        tp->failed++;
        return 0;
    }
    const char *sentinel = PyUnicode_CompareWithASCIIString(content, "x") == 0 ? "y" : "x";
    PyObject *prefix = PyUnicode_Substring(data, 0, open);
    PyObject *suffix = prefix == NULL ? NULL : PyUnicode_Substring(data, q + 1, n);
    PyObject *probe =
        suffix == NULL ? NULL : PyUnicode_FromFormat("%U\"%s\"%U", prefix, sentinel, suffix);
    PyObject *obj = probe == NULL ? NULL : PyObject_CallOneArg(loads, probe);
    Py_XDECREF(probe);
    int r = -1;
    if (obj == NULL) {
        if (probe != NULL && PyErr_ExceptionMatches(decode_error)) {
            PyErr_Clear();
            r = 0;
        }
    } else {
        PyObject *got;
        r = plain(obj, &got);
        if (r == 1) {
            r = got != NULL && PyUnicode_CompareWithASCIIString(got, sentinel) == 0;
        }
        Py_DECREF(obj);
    }
    if (r == 1) {
        forget(tp);
        tp->prefix = prefix;
        tp->suffix = suffix;
        return 0;
    }
    Py_XDECREF(prefix);
    Py_XDECREF(suffix);
    if (r == 0) {
        tp->failed++;
    }
    return r;
}

/* One plain event's content kept: appended to *pieces (a new list when it is None) and
 * its time to offsets. 0, or -1 on error. */
static int
keep(PyObject **pieces, PyObject *offsets, PyObject *content, PyObject *t_us)
{
    if (*pieces == Py_None) {
        PyObject *made = PyList_New(0);
        if (made == NULL) {
            return -1;
        }
        Py_SETREF(*pieces, made);
    }
    return PyList_Append(*pieces, content) < 0 || PyList_Append(offsets, t_us) < 0 ? -1 : 0;
}

PyDoc_STRVAR(take_plain_chat_doc,
"take_plain_chat(events, start, offsets, pieces, loads, decode_error) -> (int, list | None)\n"
"\n"
"StreamInterpreter.take_plain_chat's loop over events[start:] ((t_us, data) pairs):\n"
"each plain event's non-empty content is appended to pieces (a new list when pieces is\n"
"None and there is one) and its time to offsets. Returns the index of the first event\n"
"that is not plain (or len(events)) and pieces.");

static PyObject *
take_plain_chat(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "take_plain_chat takes 6 arguments");
        return NULL;
    }
    PyObject *events = args[0], *offsets = args[2], *pieces = args[3], *loads = args[4],
             *decode_error = args[5];
    if (!PyList_Check(events) || !PyList_Check(offsets) ||
        (pieces != Py_None && !PyList_Check(pieces))) {
        PyErr_SetString(PyExc_TypeError, "events and offsets must be lists, pieces a list or None");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "start must be >= 0");
        return NULL;
    }
    Template tp = {NULL, NULL, 0};
    Py_INCREF(pieces);
    for (; i < PyList_GET_SIZE(events); i++) {
        PyObject *item = PyList_GET_ITEM(events, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            break; /* not an event: the caller's interpret path names it */
        }
        PyObject *t_us = PyTuple_GET_ITEM(item, 0), *data = PyTuple_GET_ITEM(item, 1);
        if (!PyUnicode_CheckExact(data) || PyUnicode_GET_LENGTH(data) == 0 ||
            PyUnicode_READ_CHAR(data, 0) != '{') {
            break; /* "[DONE]", empty data, anything but an object */
        }
        if (tp.prefix != NULL) {
            PyObject *content;
            int m = match(&tp, data, loads, decode_error, &content);
            if (m < 0) {
                goto error;
            }
            if (m == 1) {
                int bad = content != NULL && keep(&pieces, offsets, content, t_us) < 0;
                Py_XDECREF(content);
                if (bad) {
                    goto error;
                }
                continue;
            }
        }
        PyObject *obj = PyObject_CallOneArg(loads, data);
        if (obj == NULL) {
            if (PyErr_ExceptionMatches(decode_error)) {
                PyErr_Clear();
                break; /* malformed JSON */
            }
            goto error;
        }
        PyObject *content;
        int r = plain(obj, &content);
        if (r == 1 && content != NULL &&
            (keep(&pieces, offsets, content, t_us) < 0 ||
             (tp.failed < MAX_FAILED_TEMPLATES &&
              prove(&tp, data, content, loads, decode_error) < 0))) {
            r = -1;
        }
        Py_DECREF(obj);
        if (r < 0) {
            goto error;
        }
        if (r == 0) {
            break;
        }
    }
    forget(&tp);
    return Py_BuildValue("(nN)", i, pieces);
error:
    forget(&tp);
    Py_DECREF(pieces);
    return NULL;
}

/* ---- simple_events ------------------------------------------------------------- */

PyDoc_STRVAR(simple_events_doc,
"simple_events(chunks) -> list[tuple[int, str]] | None\n"
"\n"
"core.protocol.sse_split.simple_events: the data field of each event of a stream of one-line\n"
"'data: ' blocks ((t_us, bytes) reads in), with the time of the read that completed it;\n"
"None for any other stream.");

static PyObject *
simple_events(PyObject *module, PyObject *chunks)
{
    (void)module;
    if (!PyList_Check(chunks)) {
        PyErr_SetString(PyExc_TypeError, "chunks must be a list");
        return NULL;
    }
    Py_ssize_t reads = PyList_GET_SIZE(chunks), total = 0;
    for (Py_ssize_t r = 0; r < reads; r++) {
        PyObject *item = PyList_GET_ITEM(chunks, r);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "chunks must hold (t_us, bytes) pairs");
            return NULL;
        }
        total += PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 1));
    }
    PyObject *events = PyList_New(0);
    if (events == NULL || total == 0) {
        return events;
    }
    char *body = PyMem_Malloc(total);
    if (body == NULL) {
        Py_DECREF(events);
        return PyErr_NoMemory();
    }
    Py_ssize_t *ends = PyMem_Malloc(reads * sizeof(Py_ssize_t)); /* each read's end offset */
    if (ends == NULL) {
        PyMem_Free(body);
        Py_DECREF(events);
        return PyErr_NoMemory();
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t r = 0; r < reads; r++) {
        PyObject *data = PyTuple_GET_ITEM(PyList_GET_ITEM(chunks, r), 1);
        memcpy(body + at, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
        at += PyBytes_GET_SIZE(data);
        ends[r] = at;
    }
    /* The stream is blocks "data: <field>\n\n" with no \n in a field and no \r anywhere. */
    int simple = memchr(body, '\r', total) == NULL && total >= 8 && memcmp(body, "data: ", 6) == 0;
    Py_ssize_t start = 6, r = 0;
    while (simple) {
        const char *nl = memchr(body + start, '\n', total - start);
        if (nl == NULL) {
            simple = 0;
            break;
        }
        Py_ssize_t i = nl - body; /* the block's \n\n is at i, i + 1 */
        if (i + 1 >= total || body[i + 1] != '\n') {
            simple = 0;
            break;
        }
        int last = i + 2 == total;
        if (!last && (total - (i + 2) < 6 || memcmp(body + i + 2, "data: ", 6) != 0)) {
            simple = 0;
            break;
        }
        while (ends[r] <= i + 1) { /* the read holding the block's last byte completed it */
            r++;
        }
        PyObject *field = PyUnicode_DecodeUTF8(body + start, i - start, "replace");
        PyObject *event = field == NULL ? NULL : PyTuple_Pack(2, PyTuple_GET_ITEM(PyList_GET_ITEM(chunks, r), 0), field);
        Py_XDECREF(field);
        if (event == NULL || PyList_Append(events, event) < 0) {
            Py_XDECREF(event);
            PyMem_Free(ends);
            PyMem_Free(body);
            Py_DECREF(events);
            return NULL;
        }
        Py_DECREF(event);
        if (last) {
            break;
        }
        start = i + 8;
    }
    PyMem_Free(ends);
    PyMem_Free(body);
    if (!simple) {
        Py_DECREF(events);
        Py_RETURN_NONE;
    }
    return events;
}

/* ---- ChunkWriter ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *write;       /* transport.write */
    PyObject *is_closing;  /* transport.is_closing */
    PyObject *buffered;    /* transport.get_write_buffer_size */
    PyObject *slow;        /* the ChunkForwarder: every other case */
    PyObject *over;        /* slow.over_high_water */
    PyObject *tail;        /* bytes whose end hands the read to slow (b"data: [DONE]\n\n"), or None */
    Py_ssize_t high_water;
} ChunkWriter;

static int
ChunkWriter_traverse(ChunkWriter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->write);
    Py_VISIT(self->is_closing);
    Py_VISIT(self->buffered);
    Py_VISIT(self->slow);
    Py_VISIT(self->over);
    Py_VISIT(self->tail);
    return 0;
}

static int
ChunkWriter_clear(ChunkWriter *self)
{
    Py_CLEAR(self->write);
    Py_CLEAR(self->is_closing);
    Py_CLEAR(self->buffered);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->over);
    Py_CLEAR(self->tail);
    return 0;
}

static void
ChunkWriter_dealloc(ChunkWriter *self)
{
    PyObject_GC_UnTrack(self);
    ChunkWriter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
ChunkWriter_init(ChunkWriter *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"transport", "slow", "tail", "high_water", NULL};
    PyObject *transport, *slow, *tail;
    Py_ssize_t high_water;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOn", names, &transport, &slow, &tail,
                                     &high_water)) {
        return -1;
    }
    if (tail != Py_None && !PyBytes_CheckExact(tail)) {
        PyErr_SetString(PyExc_TypeError, "tail must be bytes or None");
        return -1;
    }
    ChunkWriter_clear(self);
    self->write = PyObject_GetAttrString(transport, "write");
    self->is_closing = self->write ? PyObject_GetAttrString(transport, "is_closing") : NULL;
    self->buffered =
        self->is_closing ? PyObject_GetAttrString(transport, "get_write_buffer_size") : NULL;
    self->over = self->buffered ? PyObject_GetAttrString(slow, "over_high_water") : NULL;
    if (self->over == NULL) {
        return -1;
    }
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(tail);
    self->tail = tail;
    self->high_water = high_water;
    return 0;
}

static PyObject *
hand_over(ChunkWriter *self, PyObject *data)
{
    return PyObject_CallOneArg(self->slow, data);
}

static PyObject *
ChunkWriter_call(ChunkWriter *self, PyObject *args, PyObject *kwds)
{
    PyObject *data;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "ChunkWriter takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "ChunkWriter", 1, 1, &data)) {
        return NULL;
    }
    if (!PyBytes_CheckExact(data)) {
        return hand_over(self, data);
    }
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    const char *bytes = PyBytes_AS_STRING(data);
    if (self->tail != Py_None) {
        Py_ssize_t t = PyBytes_GET_SIZE(self->tail);
        if (n >= t && memcmp(bytes + n - t, PyBytes_AS_STRING(self->tail), t) == 0) {
            return hand_over(self, data); /* the last event: the end goes with it */
        }
    }
    PyObject *closing = PyObject_CallNoArgs(self->is_closing);
    if (closing == NULL) {
        return NULL;
    }
    int closed = PyObject_IsTrue(closing);
    Py_DECREF(closing);
    if (closed != 0) {
        return closed < 0 ? NULL : hand_over(self, data);
    }
    char head[2 * sizeof(Py_ssize_t) + 3];
    int h = snprintf(head, sizeof(head), "%zx\r\n", (size_t)n);
    PyObject *framed = PyBytes_FromStringAndSize(NULL, h + n + 2);
    if (framed == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(framed);
    memcpy(out, head, h);
    memcpy(out + h, bytes, n);
    memcpy(out + h + n, "\r\n", 2);
    PyObject *done = PyObject_CallOneArg(self->write, framed);
    Py_DECREF(framed);
    if (done == NULL) {
        return NULL;
    }
    Py_DECREF(done);
    PyObject *size = PyObject_CallNoArgs(self->buffered);
    if (size == NULL) {
        return NULL;
    }
    Py_ssize_t queued = PyLong_AsSsize_t(size);
    Py_DECREF(size);
    if (queued == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (queued > self->high_water) {
        return PyObject_CallNoArgs(self->over);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(ChunkWriter_doc,
"ChunkWriter(transport, slow, tail, high_water)\n"
"\n"
"Called with an upstream read (bytes): written to transport as one HTTP/1.1 chunk, then\n"
"slow.over_high_water() when more than high_water bytes wait in the transport. A read\n"
"that is not bytes, that ends with tail (when tail is not None), or that comes when the\n"
"transport is closing is handed to slow(data) instead.");

static PyTypeObject ChunkWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "specproxy.core._speedups.ChunkWriter",
    .tp_basicsize = sizeof(ChunkWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = ChunkWriter_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ChunkWriter_init,
    .tp_dealloc = (destructor)ChunkWriter_dealloc,
    .tp_traverse = (traverseproc)ChunkWriter_traverse,
    .tp_clear = (inquiry)ChunkWriter_clear,
    .tp_call = (ternaryfunc)ChunkWriter_call,
};

/* ---- latency buckets (core.measurement.histogram, proxy.records) ------------------------------- */

/* 1 when item is an exact 2-tuple of exact ints that fit in [lo, hi], with *a and *b
 * set; 0 otherwise (no error left set). */
static int
int_pair(PyObject *item, long long lo_a, long long hi_a, long long lo_b, long long hi_b,
         long long *a, long long *b)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
        return 0;
    }
    PyObject *x = PyTuple_GET_ITEM(item, 0), *y = PyTuple_GET_ITEM(item, 1);
    if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y)) {
        return 0;
    }
    int over_a, over_b;
    *a = PyLong_AsLongLongAndOverflow(x, &over_a);
    *b = PyLong_AsLongLongAndOverflow(y, &over_b);
    if (over_a || over_b || *a < lo_a || *a > hi_a || *b < lo_b || *b > hi_b) {
        PyErr_Clear(); /* AsLongLongAndOverflow sets nothing for exact ints; be sure */
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(hdr_add_doc,
"hdr_add(counts, pairs, mask, low, shift, unit, half, highest, /)\n"
"\n"
"core.measurement.histogram.LatencyHistogram.record_many's loop: adds each (value, count) of the\n"
"list pairs to the HdrHistogram counts array (a writable buffer of uint64) at the index\n"
"hdrh computes (bucket = bit_length(value | mask) - low; index = ((bucket + 1) << shift)\n"
"+ (value >> (bucket + unit)) - half). Returns (sum of counts, min value, max value), or\n"
"None, having added nothing, unless every pair is a tuple of two ints with 0 <= value\n"
"<= highest and count >= 1 whose index is inside counts (the Python loop then takes the\n"
"call, with its own errors and clamping).");

static PyObject *
hdr_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "hdr_add takes 8 arguments");
        return NULL;
    }
    PyObject *pairs = args[1];
    long long p[6];
    for (int j = 0; j < 6; j++) {
        p[j] = PyLong_AsLongLong(args[2 + j]);
        if (p[j] == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    long long mask = p[0], low = p[1], shift = p[2], unit = p[3], half = p[4],
              highest = p[5];
    if (mask <= 0 || low < 0 || low > 63 || shift < 0 || shift > 62 || unit < 0 ||
        unit > 62 || highest < 0) {
        PyErr_SetString(PyExc_ValueError, "hdr_add: bad layout");
        return NULL;
    }
    if (!PyList_CheckExact(pairs)) {
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    PyObject *result = Py_None; /* until every pair has been checked */
    Py_ssize_t n = PyList_GET_SIZE(pairs), slots = view.len / 8;
    long long value, count, total = 0, vmin = 0, vmax = 0;
    /* each pair's (index, count), found and checked before any is added */
    long long (*found)[2] = n ? PyMem_Malloc(n * sizeof *found) : NULL;
    if (view.itemsize != 8 || view.len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "hdr_add: counts must hold 8-byte items");
        result = NULL;
        goto done;
    }
    if (n == 0) {
        goto done;
    }
    if (found == NULL) {
        PyErr_NoMemory();
        result = NULL;
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!int_pair(PyList_GET_ITEM(pairs, i), 0, highest, 1, LLONG_MAX, &value, &count)) {
            goto done;
        }
        long long bucket = (64 - __builtin_clzll((unsigned long long)(value | mask))) - low;
        if (bucket < 0 || bucket + unit > 63) { /* checked before the shifts use it */
            goto done;
        }
        long long index = ((bucket + 1) << shift) + (value >> (bucket + unit)) - half;
        if (index < 0 || index >= slots || total > LLONG_MAX - count) {
            goto done;
        }
        found[i][0] = index;
        found[i][1] = count;
        total += count;
        vmin = i == 0 || value < vmin ? value : vmin;
        vmax = i == 0 || value > vmax ? value : vmax;
    }
    unsigned long long *counts = (unsigned long long *)view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        counts[found[i][0]] += (unsigned long long)found[i][1];
    }
    result = Py_BuildValue("(LLL)", total, vmin, vmax);
done:
    PyMem_Free(found);
    PyBuffer_Release(&view);
    if (result == Py_None) {
        Py_INCREF(result);
    }
    return result;
}

PyDoc_STRVAR(bucket_counts_doc,
"bucket_counts(pairs, bounds, /)\n"
"\n"
"proxy.records._observe_many's loop: for each (latency_us, tokens) of the list pairs,\n"
"the Prometheus bucket of latency_us / 1e6 (bisect_left in the list of floats bounds)\n"
"gets tokens more. Returns ({bucket index: tokens}, sum of seconds x tokens), computed\n"
"with the same float operations in the same order, or None unless every pair is a tuple\n"
"of two ints below 2**53 with tokens >= 0 and every bound a float (the Python loop then\n"
"takes the call).");

static PyObject *
bucket_counts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bucket_counts takes 2 arguments");
        return NULL;
    }
    PyObject *pairs = args[0], *bounds = args[1];
    if (!PyList_CheckExact(pairs) || !PyList_CheckExact(bounds)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t nb = PyList_GET_SIZE(bounds), n = PyList_GET_SIZE(pairs);
    for (Py_ssize_t j = 0; j < nb; j++) {
        if (!PyFloat_CheckExact(PyList_GET_ITEM(bounds, j))) {
            Py_RETURN_NONE;
        }
    }
    const long long exact = 1LL << 53; /* ints a double holds exactly, as Python converts */
    /* tokens per bucket index (bisect_left gives 0..nb), and the indices in the order
     * first seen (the dict's order, as the Python loop builds it) */
    long long *sums = PyMem_Calloc(nb + 1, sizeof *sums);
    Py_ssize_t *order = PyMem_Malloc((nb + 1) * sizeof *order);
    char *known = PyMem_Calloc(nb + 1, 1);
    PyObject *result = NULL, *counts = NULL;
    if (sums == NULL || order == NULL || known == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t seen = 0;
    long long latency, tokens;
    double total_s = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) { /* nothing changes before the end: one pass */
        if (!int_pair(PyList_GET_ITEM(pairs, i), -exact, exact, 0, exact, &latency, &tokens)) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        double seconds = (double)latency / 1e6;
        Py_ssize_t lo = 0, hi = nb; /* bisect_left */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (PyFloat_AS_DOUBLE(PyList_GET_ITEM(bounds, mid)) < seconds) {
                lo = mid + 1;
            }
            else {
                hi = mid;
            }
        }
        if (sums[lo] > LLONG_MAX - tokens) { /* past a C integer: Python's loop takes it */
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        if (!known[lo]) {
            known[lo] = 1;
            order[seen++] = lo;
        }
        sums[lo] += tokens;
        total_s += seconds * (double)tokens;
    }
    if ((counts = PyDict_New()) == NULL) {
        goto done;
    }
    for (Py_ssize_t j = 0; j < seen; j++) {
        PyObject *key = PyLong_FromSsize_t(order[j]);
        PyObject *value = PyLong_FromLongLong(sums[order[j]]);
        int bad = key == NULL || value == NULL || PyDict_SetItem(counts, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (bad) {
            goto done;
        }
    }
    result = Py_BuildValue("(Od)", counts, total_s);
done:
    Py_XDECREF(counts);
    PyMem_Free(sums);
    PyMem_Free(order);
    PyMem_Free(known);
    return result;
}

PyDoc_STRVAR(pooled_kth_doc,
"pooled_kth(groups, weights, merged, k, /)\n--\n\n"
"core.statistics.cluster._Pooled._kth in C: the k-th smallest value (0-based) of the multiset\n"
"holding groups[i] weights[i] times, found by bisection over merged. None (the Python\n"
"path then answers) unless the lists hold exact floats where they are read.");

/* bisect.bisect_right(g, x) over a list of exact floats; -1 at any other element */
static Py_ssize_t
float_bisect_right(PyObject *g, double x)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(g);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        PyObject *item = PyList_GET_ITEM(g, mid);
        if (!PyFloat_CheckExact(item)) {
            return -1;
        }
        if (x < PyFloat_AS_DOUBLE(item)) {
            hi = mid;
        }
        else {
            lo = mid + 1;
        }
    }
    return lo;
}

static PyObject *
pooled_kth(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "pooled_kth takes 4 arguments");
        return NULL;
    }
    PyObject *groups = args[0], *weights = args[1], *merged = args[2];
    long long k = PyLong_AsLongLong(args[3]);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_CheckExact(groups) || !PyList_CheckExact(weights) ||
        !PyList_CheckExact(merged) || PyList_GET_SIZE(merged) == 0 ||
        PyList_GET_SIZE(groups) != PyList_GET_SIZE(weights)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t units = PyList_GET_SIZE(groups), used = 0;
    PyObject **live = PyMem_Malloc((units + 1) * sizeof *live);
    long long *times = PyMem_Malloc((units + 1) * sizeof *times);
    PyObject *result = Py_None;
    if (live == NULL || times == NULL) {
        PyMem_Free(live);
        PyMem_Free(times);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < units; i++) { /* the groups with a weight, as _count skips */
        PyObject *g = PyList_GET_ITEM(groups, i), *w = PyList_GET_ITEM(weights, i);
        long long n = PyLong_CheckExact(w) ? PyLong_AsLongLong(w) : -1;
        if (n < 0 || n > (1LL << 20) || !PyList_CheckExact(g)) {
            PyErr_Clear();
            goto done;
        }
        if (n) {
            live[used] = g;
            times[used++] = n;
        }
    }
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(merged) - 1;
    while (lo < hi) { /* the smallest merged value with more than k values at or below it */
        Py_ssize_t mid = (lo + hi) / 2;
        PyObject *item = PyList_GET_ITEM(merged, mid);
        if (!PyFloat_CheckExact(item)) {
            goto done;
        }
        double x = PyFloat_AS_DOUBLE(item);
        long long count = 0;
        for (Py_ssize_t j = 0; j < used; j++) {
            Py_ssize_t at = float_bisect_right(live[j], x);
            if (at < 0) {
                goto done;
            }
            count += times[j] * (long long)at;
        }
        if (count > k) {
            hi = mid;
        }
        else {
            lo = mid + 1;
        }
    }
    result = PyList_GET_ITEM(merged, lo);
done:
    PyMem_Free(live);
    PyMem_Free(times);
    Py_INCREF(result);
    return result;
}

PyDoc_STRVAR(cut_chunk_arrays_doc,
"cut_chunk_arrays(raw, /)\n--\n\n"
"core.records.chunk_span.cut_chunk_arrays(raw) for a records line that ends in its chunk arrays\n"
"and whose first chunk gap, if any, is a plain integer (an optional minus, 1 to 18\n"
"digits); None for any other line, which the Python function, the reference, then takes.");

static const char cut_gaps_key[] = ",\"chunk_gaps_us\":[";
static const char choices_key[] = "],\"chunk_choices\":[";

/* The last occurrence of cut_gaps_key in s[0:n] (its last byte is the only '['), or -1. */
static Py_ssize_t
cut_find_key(const char *s, Py_ssize_t n)
{
    const Py_ssize_t klen = (Py_ssize_t)sizeof cut_gaps_key - 1;
#ifdef __GLIBC__
    const char *p = s + n;
    while ((p = memrchr(s, '[', (size_t)(p - s))) != NULL) {
        Py_ssize_t i = (p - s) - (klen - 1);
        if (i >= 0 && memcmp(s + i, cut_gaps_key, (size_t)klen) == 0) {
            return i;
        }
    }
#else
    for (Py_ssize_t i = n - klen; i >= 0; i--) {
        if (s[i + klen - 1] == '[' && memcmp(s + i, cut_gaps_key, (size_t)klen) == 0) {
            return i;
        }
    }
#endif
    return -1;
}

/* s[0:n] as a plain integer (an optional minus, 1 to 18 digits) into *out: 1; else 0. */
static int
cut_plain_int(const char *s, Py_ssize_t n, long long *out)
{
    int negative = n > 0 && s[0] == '-';
    Py_ssize_t i = negative;
    if (n - i < 1 || n - i > 18) {
        return 0;
    }
    long long value = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
        value = value * 10 + (s[i] - '0');
    }
    *out = negative ? -value : value;
    return 1;
}

/* The commas in s[0:n], eight bytes at a time. */
static Py_ssize_t
cut_count_commas(const char *s, Py_ssize_t n)
{
    Py_ssize_t count = 0, i = 0;
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL, commas = 0x2c2c2c2c2c2c2c2cULL;
    const uint64_t ones = 0x0101010101010101ULL;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        v ^= commas; /* a comma's byte is now 0, and only its byte gets 1 below */
        uint64_t zero = (~(((v & low7) + low7) | v | low7)) >> 7;
        count += (Py_ssize_t)((zero * ones) >> 56); /* the sum of the eight bytes (at most 8) */
    }
    for (; i < n; i++) {
        count += s[i] == ',';
    }
    return count;
}

static PyObject *
cut_chunk_arrays(PyObject *self, PyObject *arg)
{
    if (!PyBytes_CheckExact(arg)) {
        Py_RETURN_NONE;
    }
    const char *s = PyBytes_AS_STRING(arg);
    const Py_ssize_t n = PyBytes_GET_SIZE(arg);
    const Py_ssize_t klen = (Py_ssize_t)sizeof cut_gaps_key - 1;
    const Py_ssize_t clen = (Py_ssize_t)sizeof choices_key - 1;
    Py_ssize_t at = cut_find_key(s, n);
    if (at < 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t end = n - ((n >= 3 && memcmp(s + n - 3, "]}\n", 3) == 0) ? 3 : 2);
    Py_ssize_t gaps_at = at + klen;
    if (end < clen || gaps_at > end || s[end] != ']' || s[end + 1] != '}') {
        Py_RETURN_NONE;
    }
    long long first = -1;
    if (s[gaps_at] != ']') {
        const char *comma = memchr(s + gaps_at, ',', (size_t)(end - gaps_at));
        if (comma == NULL) {
            Py_RETURN_NONE;
        }
        Py_ssize_t stop = comma - s;
        if (s[stop - 1] == ']') {
            stop--;
        }
        if (!cut_plain_int(s + gaps_at, stop - gaps_at, &first)) {
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t commas = cut_count_commas(s + gaps_at, end - gaps_at);
    int choices = memcmp(s + end - clen, choices_key, (size_t)clen) != 0;
    PyObject *cut = PyBytes_FromStringAndSize(NULL, at + 1);
    if (cut == NULL) {
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(cut), s, (size_t)at);
    PyBytes_AS_STRING(cut)[at] = '}';
    return Py_BuildValue("(NnLO)", cut, commas, first, choices ? Py_True : Py_False);
}

PyDoc_STRVAR(window_runs_doc,
"window_runs(raw, base, scale, last, /)\n--\n\n"
"A records line's chunk tokens per throughput window, as report.timeline's Python loop\n"
"adds them: [(window, tokens), ...], one per run of chunks in one window, the window of a\n"
"chunk at offset o being min(last, int(base + o * scale)). Only for a line that ends in\n"
"its chunk arrays as schema 3 writes them, every gap and token a plain integer (an\n"
"optional minus, 1 to 18 digits), no gap negative and as many tokens as gaps; None for\n"
"any other line (the Python loop, the reference, then reads it).");

static const char runs_tokens_key[] = "],\"chunk_tokens\":[";

/* A JSON array body at *p (before end) of plain integers within [low, high] (no leading
 * zero, as JSON has none), up to and past its "]": their count, *p then just past the
 * "]"; -1 for anything else. */
static Py_ssize_t
runs_array(const char **p, const char *end, long long low, long long high)
{
    const char *q = *p;
    Py_ssize_t count = 0;
    if (q < end && *q == ']') {
        *p = q + 1;
        return 0;
    }
    for (;;) {
        const char *stop = q;
        long long value;
        while (stop < end && *stop != ',' && *stop != ']') {
            stop++;
        }
        if (stop == end || !cut_plain_int(q, stop - q, &value) || value < low || value > high) {
            return -1;
        }
        const char *digits = q + (*q == '-');
        if (*digits == '0' && stop - digits > 1) {
            return -1; /* a leading zero: not JSON */
        }
        count++;
        q = stop + 1;
        if (*stop == ']') {
            *p = q;
            return count;
        }
    }
}

/* The plain integer at *p (checked by runs_array), *p then past the "," or "]" after it. */
static long long
runs_read(const char **p)
{
    const char *q = *p;
    int negative = *q == '-';
    long long value = 0;
    for (q += negative; *q >= '0' && *q <= '9'; q++) {
        value = value * 10 + (*q - '0');
    }
    *p = q + 1;
    return negative ? -value : value;
}

static PyObject *
window_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyFloat_CheckExact(args[1]) ||
        !PyFloat_CheckExact(args[2]) || !PyLong_CheckExact(args[3])) {
        Py_RETURN_NONE;
    }
    const char *s = PyBytes_AS_STRING(args[0]);
    const Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    const double base = PyFloat_AS_DOUBLE(args[1]), scale = PyFloat_AS_DOUBLE(args[2]);
    long long last = PyLong_AsLongLong(args[3]);
    if (last == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t at = cut_find_key(s, n);
    if (at < 0) {
        Py_RETURN_NONE;
    }
    const char *end = s + n - ((n >= 1 && s[n - 1] == '\n') ? 1 : 0);
    const char *gaps_at = s + at + sizeof cut_gaps_key - 1, *p = gaps_at;
    Py_ssize_t gaps = runs_array(&p, end, 0, 1LL << 53); /* a negative gap: Python's */
    const Py_ssize_t klen = (Py_ssize_t)sizeof runs_tokens_key - 2; /* without its "]" */
    if (gaps <= 0 || end - p < klen || memcmp(p, runs_tokens_key + 1, (size_t)klen) != 0) {
        Py_RETURN_NONE;
    }
    const char *tokens_at = p + klen;
    p = tokens_at;
    if (runs_array(&p, end, -(1LL << 31), 1LL << 31) != gaps) {
        Py_RETURN_NONE;
    }
    const Py_ssize_t clen = (Py_ssize_t)sizeof choices_key - 2;
    if (end - p >= clen && memcmp(p, choices_key + 1, (size_t)clen) == 0) {
        p += clen;
        if (runs_array(&p, end, LLONG_MIN + 1, LLONG_MAX) < 0) {
            Py_RETURN_NONE;
        }
    }
    if (end - p != 1 || *p != '}') {
        Py_RETURN_NONE;
    }
    PyObject *runs = PyList_New(0);
    if (runs == NULL) {
        return NULL;
    }
    long long offset = 0, window = 0, sum = 0;
    int open = 0;
    const char *g = gaps_at, *t = tokens_at;
    for (Py_ssize_t k = 0; k < gaps; k++) {
        long long gap = runs_read(&g), token = runs_read(&t);
        offset += gap;
        if (offset > (1LL << 53)) {
            Py_DECREF(runs);
            Py_RETURN_NONE; /* past where a float holds every integer: Python's */
        }
        volatile double product = (double)offset * scale; /* rounded: no fused multiply-add */
        double x = base + product;
        if (!(x > -9.0e18 && x < 9.0e18)) {
            Py_DECREF(runs);
            Py_RETURN_NONE;
        }
        long long index = (long long)x; /* toward zero, as int() */
        index = index < last ? index : last;
        if (open && index != window) {
            PyObject *item = Py_BuildValue("(LL)", window, sum);
            if (item == NULL || PyList_Append(runs, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(runs);
                return NULL;
            }
            Py_DECREF(item);
            sum = 0;
        }
        window = index;
        sum += token;
        open = 1;
    }
    PyObject *item = Py_BuildValue("(LL)", window, sum);
    if (item == NULL || PyList_Append(runs, item) < 0) {
        Py_XDECREF(item);
        Py_DECREF(runs);
        return NULL;
    }
    Py_DECREF(item);
    return runs;
}

static PyMethodDef methods[] = {
    {"pooled_kth", (PyCFunction)(void (*)(void))pooled_kth, METH_FASTCALL, pooled_kth_doc},
    {"hdr_add", (PyCFunction)(void (*)(void))hdr_add, METH_FASTCALL, hdr_add_doc},
    {"bucket_counts", (PyCFunction)(void (*)(void))bucket_counts, METH_FASTCALL,
     bucket_counts_doc},
    {"simple_events", (PyCFunction)simple_events, METH_O, simple_events_doc},
    {"take_plain_chat", (PyCFunction)(void (*)(void))take_plain_chat, METH_FASTCALL,
     take_plain_chat_doc},
    {"cut_chunk_arrays", (PyCFunction)cut_chunk_arrays, METH_O, cut_chunk_arrays_doc},
    {"window_runs", (PyCFunction)(void (*)(void))window_runs, METH_FASTCALL, window_runs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_speedups",
    "The proxy's commonest loops, in C (see core.protocol.events and proxy.client_answer).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } keys[] = {
        {&k_usage, "usage"},
        {&k_sglext, "sglext"},
        {&k_timings, "timings"},
        {&k_choices, "choices"},
        {&k_delta, "delta"},
        {&k_finish_reason, "finish_reason"},
        {&k_token_ids, "token_ids"},
        {&k_logprobs, "logprobs"},
        {&k_index, "index"},
        {&k_reasoning_content, "reasoning_content"},
        {&k_reasoning, "reasoning"},
        {&k_tool_calls, "tool_calls"},
        {&k_content, "content"},
    };
    if ((k_content_key = PyUnicode_InternFromString("\"content\":\"")) == NULL) {
        return NULL;
    }
    for (size_t j = 0; j < sizeof(keys) / sizeof(keys[0]); j++) {
        if ((*keys[j].slot = PyUnicode_InternFromString(keys[j].name)) == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&ChunkWriterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&ChunkWriterType);
    if (PyModule_AddObject(m, "ChunkWriter", (PyObject *)&ChunkWriterType) < 0) {
        Py_DECREF(&ChunkWriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
