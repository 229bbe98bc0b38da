/*
** hermes_event_text: a stored message's text read from its event in C, for the search's hits.
**
** The reference is hermes_message_text (hermes_es/store/message_text.py), which the messages
** view calls: it unpacks the stored payload (hermes_es/store/codec.py: plain msgpack, or 0xC1
** then a dictionary id and a zstd frame without its magic number) and decodes only the message
** contents with msgspec. This function does the same without Python, and returns NULL wherever
** it is not sure to return that function's value: a payload or a shape it does not take (a
** frame it cannot decompress, a value msgspec might decode differently or reject, trailing
** bytes, an extension type inside a message's parts, nesting deeper than MAX_DEPTH, ...). The
** caller then asks the reference (queries/event_text.py: coalesce(this, content)), so the text
** is the same either way.
**
**   hermes_event_text(state, index, key): state is the event's stored payload; key the field
**   holding the event's messages: 'message' (one message, index 0) or any other name (a list
**   of messages, the index-th one).
**   hermes_text_dictionary(id, bytes): make dictionary id (hermes_es/store/zdict.py) known to
**   this connection; 1 when zstd is available, else 0 (hermes_event_text then always NULL).
**
** zstd is the system's libzstd, opened with dlopen on first use (no build-time dependency; the
** Python package bundles its own copy, which has no C interface): only stable functions of its
** API are called. A message's text: a string content as it is; a list of parts: the string
** "text" of each part that has one, joined by newlines; no content: the empty text.
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

int hermes_text_register(sqlite3 *db);

#define FRAME_MARK 0xC1
#define MAX_DEPTH 32
#define MAX_CONTENT ((sqlite3_uint64)64 << 20)
#define CONTENTSIZE_UNKNOWN (0ULL - 1)
#define CONTENTSIZE_ERROR (0ULL - 2)

/* ----------------------------------------------------------------- libzstd through dlopen */

typedef struct Zstd {
  void *lib;
  void *(*createDCtx)(void);
  size_t (*freeDCtx)(void *);
  void *(*createDDict)(const void *, size_t);
  size_t (*freeDDict)(void *);
  size_t (*decompressDDict)(void *, void *, size_t, const void *, size_t, const void *);
  unsigned long long (*contentSize)(const void *, size_t);
  size_t (*compressedSize)(const void *, size_t);
  unsigned (*isError)(size_t);
  unsigned (*version)(void);
} Zstd;

typedef struct TextCtx {
  int tried;    /* libzstd looked for */
  int have;     /* and found */
  Zstd z;
  void *dctx;
  void *dicts[256];
  unsigned char *frame; /* the stored frame with its magic number put back */
  sqlite3_uint64 cap;
} TextCtx;

static int zstd_open(TextCtx *t) {
  static const char *names[] = {"libzstd.so.1", "libzstd.so", "libzstd.1.dylib", "libzstd.dylib"};
  size_t i;
  Zstd *z = &t->z;
  if (t->tried) return t->have;
  t->tried = 1;
  for (i = 0; i < sizeof(names) / sizeof(names[0]) && z->lib == 0; i++) {
    z->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (z->lib == 0) return 0;
  *(void **)&z->createDCtx = dlsym(z->lib, "ZSTD_createDCtx");
  *(void **)&z->freeDCtx = dlsym(z->lib, "ZSTD_freeDCtx");
  *(void **)&z->createDDict = dlsym(z->lib, "ZSTD_createDDict");
  *(void **)&z->freeDDict = dlsym(z->lib, "ZSTD_freeDDict");
  *(void **)&z->decompressDDict = dlsym(z->lib, "ZSTD_decompress_usingDDict");
  *(void **)&z->contentSize = dlsym(z->lib, "ZSTD_getFrameContentSize");
  *(void **)&z->compressedSize = dlsym(z->lib, "ZSTD_findFrameCompressedSize");
  *(void **)&z->isError = dlsym(z->lib, "ZSTD_isError");
  *(void **)&z->version = dlsym(z->lib, "ZSTD_versionNumber");
  if (!z->createDCtx || !z->freeDCtx || !z->createDDict || !z->freeDDict ||
      !z->decompressDDict || !z->contentSize || !z->compressedSize || !z->isError ||
      !z->version || z->version() < 10400) {
    dlclose(z->lib);
    memset(z, 0, sizeof(*z));
    return 0;
  }
  t->dctx = z->createDCtx();
  if (t->dctx == 0) {
    dlclose(z->lib);
    memset(z, 0, sizeof(*z));
    return 0;
  }
  t->have = 1;
  return 1;
}

static void text_ctx_delete(void *p) {
  TextCtx *t = (TextCtx *)p;
  int i;
  if (t == 0) return;
  if (t->have) {
    for (i = 0; i < 256; i++) {
      if (t->dicts[i]) t->z.freeDDict(t->dicts[i]);
    }
    t->z.freeDCtx(t->dctx);
    dlclose(t->z.lib);
  }
  sqlite3_free(t->frame);
  sqlite3_free(t);
}

/* The payload a stored one holds (codec.unpack): *out points into state, or into *owned (a
** decompressed copy, sqlite3_malloc'd). 0: not taken (unknown dictionary, bad frame, ...). */
static int unpack(TextCtx *t, const unsigned char *state, sqlite3_uint64 n,
                  const unsigned char **out, sqlite3_uint64 *nout, unsigned char **owned) {
  unsigned long long size;
  size_t got;
  void *dict;
  *owned = 0;
  if (n == 0 || state[0] != FRAME_MARK) {
    *out = state;
    *nout = n;
    return 1;
  }
  if (n < 2) return 0;
  if (state[1] == 0) {
    *out = state + 2;
    *nout = n - 2;
    return 1;
  }
  dict = t->have ? t->dicts[state[1]] : 0;
  if (dict == 0 || n - 2 > MAX_CONTENT) return 0;
  if (t->cap < n + 2) {
    unsigned char *p = sqlite3_realloc64(t->frame, n + 2);
    if (p == 0) return 0;
    t->frame = p;
    t->cap = n + 2;
  }
  t->frame[0] = 0x28; /* the zstd magic number, little-endian */
  t->frame[1] = 0xB5;
  t->frame[2] = 0x2F;
  t->frame[3] = 0xFD;
  memcpy(t->frame + 4, state + 2, (size_t)(n - 2));
  n += 2;
  size = t->z.contentSize(t->frame, (size_t)n);
  if (size == CONTENTSIZE_UNKNOWN || size == CONTENTSIZE_ERROR || size > MAX_CONTENT) return 0;
  got = t->z.compressedSize(t->frame, (size_t)n);
  if (t->z.isError(got) || got != (size_t)n) return 0;
  *owned = sqlite3_malloc64(size ? size : 1);
  if (*owned == 0) return 0;
  got = t->z.decompressDDict(t->dctx, *owned, (size_t)size, t->frame, (size_t)n, dict);
  if (t->z.isError(got) || got != (size_t)size) {
    sqlite3_free(*owned);
    *owned = 0;
    return 0;
  }
  *out = *owned;
  *nout = size;
  return 1;
}

/* -------------------------------------------------------------------------------- msgpack */

typedef struct Rd {
  const unsigned char *p;
  sqlite3_uint64 n, i;
} Rd;

static int rd_uint(Rd *r, int bytes, sqlite3_uint64 *v) {
  int k;
  if (r->n - r->i < (sqlite3_uint64)bytes) return 0;
  *v = 0;
  for (k = 0; k < bytes; k++) *v = (*v << 8) | r->p[r->i++];
  return 1;
}

/* Strict UTF-8 (what Python's decoder takes): no overlong forms, surrogates or code points
** past U+10FFFF. */
static int utf8_ok(const unsigned char *z, sqlite3_uint64 n) {
  sqlite3_uint64 i = 0;
  while (i < n) {
    unsigned c = z[i];
    sqlite3_uint64 need;
    uint32_t cp;
    if (c < 0x80) {
      uint64_t w;
      i++;
      while (n - i >= 8) { /* ASCII runs eight bytes at a time */
        memcpy(&w, z + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
      }
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07;
    else return 0;
    if (n - i <= need) return 0;
    for (sqlite3_uint64 k = 1; k <= need; k++) {
      if ((z[i + k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (z[i + k] & 0x3F);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += need + 1;
  }
  return 1;
}

/* Kinds of the next value. */
enum { K_BAD, K_NIL, K_SCALAR, K_STR, K_BIN, K_ARRAY, K_MAP, K_EXT };

/* The next value's kind and, for a string, bin, array, map or extension, its length (bytes,
** items, pairs; an extension's data bytes, its type byte read). The reader is then at the
** value's data (scalars: past them). */
static int rd_head(Rd *r, sqlite3_uint64 *len) {
  unsigned c;
  sqlite3_uint64 v = 0;
  if (r->i >= r->n) return K_BAD;
  c = r->p[r->i++];
  *len = 0;
  if (c <= 0x7f || c >= 0xe0) return K_SCALAR;
  if (c >= 0x80 && c <= 0x8f) return (*len = c & 0x0f), K_MAP;
  if (c >= 0x90 && c <= 0x9f) return (*len = c & 0x0f), K_ARRAY;
  if (c >= 0xa0 && c <= 0xbf) return (*len = c & 0x1f), K_STR;
  switch (c) {
    case 0xc0: return K_NIL;
    case 0xc2: case 0xc3: return K_SCALAR;
    case 0xc4: case 0xc5: case 0xc6:
      if (!rd_uint(r, 1 << (c - 0xc4), &v)) return K_BAD;
      return (*len = v), K_BIN;
    case 0xc7: case 0xc8: case 0xc9:
      if (!rd_uint(r, 1 << (c - 0xc7), &v) || r->i >= r->n) return K_BAD;
      r->i++; /* the type */
      return (*len = v), K_EXT;
    case 0xca: return rd_uint(r, 4, &v) ? K_SCALAR : K_BAD;
    case 0xcb: return rd_uint(r, 8, &v) ? K_SCALAR : K_BAD;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
      return rd_uint(r, 1 << (c - 0xcc), &v) ? K_SCALAR : K_BAD;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3:
      return rd_uint(r, 1 << (c - 0xd0), &v) ? K_SCALAR : K_BAD;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
      if (r->i >= r->n) return K_BAD;
      r->i++;
      return (*len = (sqlite3_uint64)1 << (c - 0xd4)), K_EXT;
    case 0xd9: case 0xda: case 0xdb:
      if (!rd_uint(r, 1 << (c - 0xd9), &v)) return K_BAD;
      return (*len = v), K_STR;
    case 0xdc: case 0xdd:
      if (!rd_uint(r, 2 << (c - 0xdc), &v)) return K_BAD;
      return (*len = v), K_ARRAY;
    case 0xde: case 0xdf:
      if (!rd_uint(r, 2 << (c - 0xde), &v)) return K_BAD;
      return (*len = v), K_MAP;
    default: return K_BAD; /* 0xc1 */
  }
}

static int rd_bytes(Rd *r, sqlite3_uint64 len, const unsigned char **z) {
  if (r->n - r->i < len) return 0;
  *z = r->p + r->i;
  r->i += len;
  return 1;
}

/* Skip one value. strict: as msgspec decodes it as Any (strings valid UTF-8, map keys
** strings, no extension types), else only well formed. */
static int rd_skip(Rd *r, int depth, int strict) {
  sqlite3_uint64 len, k;
  const unsigned char *z;
  int kind;
  if (depth > MAX_DEPTH) return 0;
  kind = rd_head(r, &len);
  switch (kind) {
    case K_NIL: case K_SCALAR: return 1;
    case K_STR:
      if (!rd_bytes(r, len, &z)) return 0;
      return !strict || utf8_ok(z, len);
    case K_BIN: return rd_bytes(r, len, &z);
    case K_EXT: return !strict && rd_bytes(r, len, &z);
    case K_ARRAY:
      if (len > r->n - r->i) return 0;
      for (k = 0; k < len; k++) {
        if (!rd_skip(r, depth + 1, strict)) return 0;
      }
      return 1;
    case K_MAP:
      if (len > r->n - r->i) return 0;
      for (k = 0; k < len; k++) {
        if (strict) {
          sqlite3_uint64 klen;
          if (rd_head(r, &klen) != K_STR || !rd_bytes(r, klen, &z) || !utf8_ok(z, klen)) return 0;
        } else if (!rd_skip(r, depth + 1, 0)) {
          return 0;
        }
        if (!rd_skip(r, depth + 1, strict)) return 0;
      }
      return 1;
    default: return 0;
  }
}

/* A map key: a valid UTF-8 string (else not taken). */
static int rd_key(Rd *r, const unsigned char **z, sqlite3_uint64 *len) {
  return rd_head(r, len) == K_STR && rd_bytes(r, *len, z) && utf8_ok(*z, *len);
}

static int key_is(const unsigned char *z, sqlite3_uint64 n, const char *name) {
  size_t m = strlen(name);
  return n == m && memcmp(z, name, m) == 0;
}

typedef struct Text {
  sqlite3_str *out; /* parts joined (a list content), else 0 */
  const unsigned char *z;
  sqlite3_uint64 n;
} Text;

/* The text of a list of parts: each part a map of string keys, its "text" when a string. */
static int parts_text(Rd *r, sqlite3_uint64 nparts, Text *t) {
  sqlite3_uint64 k, j, len, klen;
  const unsigned char *z;
  int first = 1;
  t->out = sqlite3_str_new(0);
  for (k = 0; k < nparts; k++) {
    int seen = 0;
    if (rd_head(r, &len) != K_MAP || len > r->n - r->i) return 0;
    for (j = 0; j < len; j++) {
      if (!rd_key(r, &z, &klen)) return 0;
      if (key_is(z, klen, "text")) {
        sqlite3_uint64 save = r->i, slen;
        if (seen++) return 0;
        if (rd_head(r, &slen) == K_STR) {
          if (!rd_bytes(r, slen, &z) || !utf8_ok(z, slen)) return 0;
          if (!first) sqlite3_str_appendchar(t->out, 1, '\n');
          sqlite3_str_append(t->out, (const char *)z, (int)slen);
          first = 0;
          continue;
        }
        r->i = save;
      }
      if (!rd_skip(r, 1, 1)) return 0;
    }
  }
  return sqlite3_str_errcode(t->out) == SQLITE_OK;
}

/* One message (a map of string keys): its text in *t (no content: the empty text). */
static int message_text(Rd *r, Text *t) {
  sqlite3_uint64 len, j, klen, vlen;
  const unsigned char *z;
  int seen = 0;
  if (rd_head(r, &len) != K_MAP || len > r->n - r->i) return 0;
  t->out = 0;
  t->z = (const unsigned char *)"";
  t->n = 0;
  for (j = 0; j < len; j++) {
    if (!rd_key(r, &z, &klen)) return 0;
    if (!key_is(z, klen, "content")) {
      if (!rd_skip(r, 1, 0)) return 0;
      continue;
    }
    if (seen++) return 0;
    switch (rd_head(r, &vlen)) {
      case K_STR:
        if (!rd_bytes(r, vlen, &t->z) || !utf8_ok(t->z, vlen)) return 0;
        t->n = vlen;
        break;
      case K_ARRAY:
        if (vlen > r->n - r->i || !parts_text(r, vlen, t)) return 0;
        break;
      default: return 0;
    }
  }
  return 1;
}

static void text_free(Text *t) {
  if (t->out) sqlite3_free(sqlite3_str_finish(t->out));
  t->out = 0;
}

/* The index-th message's text of payload p (under key: one message, or a list of them). */
static int payload_text(const unsigned char *p, sqlite3_uint64 n, const unsigned char *key,
                        sqlite3_uint64 nkey, sqlite3_int64 index, Text *found) {
  Rd r = {p, n, 0};
  sqlite3_uint64 len, j, klen;
  const unsigned char *z;
  int many = !(nkey == 7 && memcmp(key, "message", 7) == 0), seen = 0;
  if (rd_head(&r, &len) != K_MAP || len > n) return 0;
  for (j = 0; j < len; j++) {
    if (!rd_key(&r, &z, &klen)) return 0;
    if (klen != nkey || memcmp(z, key, (size_t)nkey) != 0) {
      if (!rd_skip(&r, 1, 0)) return 0;
      continue;
    }
    if (seen++) return 0;
    if (!many) {
      if (index != 0 || !message_text(&r, found)) return 0;
      continue;
    }
    {
      sqlite3_uint64 items, k;
      if (rd_head(&r, &items) != K_ARRAY || items > n - r.i) return 0;
      if (index < 0 || (sqlite3_uint64)index >= items) return 0;
      for (k = 0; k < items; k++) {
        Text t = {0, 0, 0};
        if (!message_text(&r, &t)) {
          text_free(&t);
          return 0;
        }
        if (k == (sqlite3_uint64)index) *found = t;
        else text_free(&t);
      }
    }
  }
  return seen == 1 && r.i == n;
}

static void event_text(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  TextCtx *t = (TextCtx *)sqlite3_user_data(ctx);
  const unsigned char *state, *payload, *key;
  unsigned char *owned = 0;
  sqlite3_uint64 n, np;
  Text found = {0, 0, 0};
  (void)argc;
  if (!t->have || sqlite3_value_type(argv[0]) != SQLITE_BLOB ||
      sqlite3_value_type(argv[1]) != SQLITE_INTEGER || sqlite3_value_type(argv[2]) != SQLITE_TEXT)
    return;
  state = (const unsigned char *)sqlite3_value_blob(argv[0]);
  n = (sqlite3_uint64)sqlite3_value_bytes(argv[0]);
  key = sqlite3_value_text(argv[2]);
  if (state == 0 || key == 0) return;
  if (!unpack(t, state, n, &payload, &np, &owned)) return;
  if (payload_text(payload, np, key, (sqlite3_uint64)sqlite3_value_bytes(argv[2]),
                   sqlite3_value_int64(argv[1]), &found)) {
    if (found.out) {
      sqlite3_int64 len = sqlite3_str_length(found.out);
      char *z = sqlite3_str_finish(found.out);
      found.out = 0;
      if (z) sqlite3_result_text64(ctx, z, (sqlite3_uint64)len, sqlite3_free, SQLITE_UTF8);
      else sqlite3_result_text(ctx, "", 0, SQLITE_STATIC);
    } else {
      sqlite3_result_text64(ctx, (const char *)found.z, found.n, SQLITE_TRANSIENT, SQLITE_UTF8);
    }
  }
  text_free(&found);
  sqlite3_free(owned);
}

static void text_dictionary(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  TextCtx *t = (TextCtx *)sqlite3_user_data(ctx);
  sqlite3_int64 id = sqlite3_value_int64(argv[0]);
  (void)argc;
  if (!zstd_open(t) || id < 1 || id > 255 || sqlite3_value_type(argv[1]) != SQLITE_BLOB) {
    sqlite3_result_int(ctx, 0);
    return;
  }
  if (t->dicts[id] == 0) {
    t->dicts[id] = t->z.createDDict(sqlite3_value_blob(argv[1]), (size_t)sqlite3_value_bytes(argv[1]));
  }
  sqlite3_result_int(ctx, t->dicts[id] != 0);
}

int hermes_text_register(sqlite3 *db) {
  TextCtx *t = sqlite3_malloc(sizeof(TextCtx));
  int rc;
  if (t == 0) return SQLITE_NOMEM;
  memset(t, 0, sizeof(*t));
  rc = sqlite3_create_function_v2(db, "hermes_text_dictionary", 2, SQLITE_UTF8 | SQLITE_DIRECTONLY,
                                  t, text_dictionary, 0, 0, 0);
  if (rc != SQLITE_OK) {
    sqlite3_free(t);
    return rc;
  }
  return sqlite3_create_function_v2(db, "hermes_event_text", 3,
                                    SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, t,
                                    event_text, 0, 0, text_ctx_delete);
}
