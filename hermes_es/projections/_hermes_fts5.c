/*
** The `hermes` FTS5 tokenizer as an SQLite loadable extension.
**
** The same tokens as the Python tokenizer in fts.py (its reference), so no Python runs per row:
** SQLite's `unicode61` (`remove_diacritics 2` plus the `tokenize=` arguments), then
**   - a token holding CJK characters is split so each CJK character is its own token (byte
**     offsets into the input) and each run of other characters is tokenized again;
**   - document mode: each token of a run of tokens joined by 1-3 bytes of punctuation gets a
**     colocated identifier token (0x1f, then the run's text from that token on, 48 characters);
**   - query mode: a text starting with 0x1f is one token as it is.
** Token texts are what the Python tokenizer hands FTS5: its strings come from apsw decoding
** UTF-8 with errors="replace", so a byte sequence that is not UTF-8 becomes U+FFFD here too
** (Python's maximal-subpart rule), and characters are counted as Python counts them.
**
** Entry point: sqlite3_hermesfts_init. Uses the stable extension API and the version 1
** fts5 tokenizer API (found through SELECT fts5(?1)).
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MARK 0x1f
#define IDENTIFIER_CHARS 48
#define JOINER_BYTES 3

/* ---------------------------------------------------------------- UTF-8 as Python reads it */

/* The sequence at z (n bytes left): its length (1-4) and code point when it is valid UTF-8
** (strict: no overlong forms, surrogates or code points past U+10FFFF), else minus the length
** of its maximal invalid subpart, which Python replaces by one U+FFFD. */
static int utf8_next(const unsigned char *z, int n, uint32_t *cp) {
  unsigned c = z[0];
  unsigned lo = 0x80, hi = 0xbf;
  int need, i;
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c >= 0xc2 && c <= 0xdf) {
    need = 1;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 2;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 3;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return -1;
  }
  for (i = 1; i <= need; i++) {
    unsigned b;
    if (i >= n) return -i;
    b = z[i];
    if (b < lo || b > hi) return -i;
    lo = 0x80;
    hi = 0xbf;
  }
  if (need == 1) {
    *cp = ((c & 0x1f) << 6) | (z[1] & 0x3f);
  } else if (need == 2) {
    *cp = ((c & 0x0f) << 12) | ((uint32_t)(z[1] & 0x3f) << 6) | (z[2] & 0x3f);
  } else {
    *cp = ((c & 0x07) << 18) | ((uint32_t)(z[1] & 0x3f) << 12) | ((uint32_t)(z[2] & 0x3f) << 6) |
          (z[3] & 0x3f);
  }
  return need + 1;
}

static int is_ascii(const unsigned char *z, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, z + i, 8);
    if (w & 0x8080808080808080ull) return 0;
  }
  for (; i < n; i++) {
    if (z[i] & 0x80) return 0;
  }
  return 1;
}

/* fts.py's _CJK_CLASS. */
static int is_cjk(uint32_t c) {
  if (c < 0x1100) return 0;
  return (c <= 0x11ff) || (c >= 0x2e80 && c <= 0x2fdf) || (c >= 0x3005 && c <= 0x3007) ||
         (c >= 0x3021 && c <= 0x3029) || (c >= 0x3031 && c <= 0x3035) ||
         (c >= 0x3038 && c <= 0x303c) || (c >= 0x3040 && c <= 0x30ff) ||
         (c >= 0x3100 && c <= 0x31ff) || (c >= 0x3400 && c <= 0x4dbf) ||
         (c >= 0x4e00 && c <= 0x9fff) || (c >= 0xa960 && c <= 0xa97f) ||
         (c >= 0xac00 && c <= 0xd7ff) || (c >= 0xf900 && c <= 0xfaff) ||
         (c >= 0xff66 && c <= 0xffdc) || (c >= 0x1b000 && c <= 0x1b16f) ||
         (c >= 0x20000 && c <= 0x3ffff);
}

/* Python's str.isspace(). */
static int is_py_space(uint32_t c) {
  if (c <= 0x20) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c);
  if (c < 0x85) return 0;
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* fts.py's _SPACE: the six ASCII white-space bytes. */
static int is_ascii_space(unsigned c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d);
}

/* ---------------------------------------------------------------- token lists */

typedef struct Tok {
  int start, end;   /* byte offsets into the input */
  int off, len;     /* text: buffer offset and bytes */
  int nchars;       /* text length in code points */
  int ascii;        /* text is all ASCII */
  int coff, clen;   /* colocated identifier token (clen 0: none) */
} Tok;

typedef struct Buf {
  Tok *toks;
  int ntok, captok;
  char *text;
  sqlite3_int64 ntext, captext;
  int rc;
} Buf;

static int buf_reserve(Buf *b, sqlite3_int64 extra) {
  if (b->ntext + extra > b->captext) {
    sqlite3_int64 cap = b->captext ? b->captext * 2 : 4096;
    char *p;
    while (cap < b->ntext + extra) cap *= 2;
    p = sqlite3_realloc64(b->text, (sqlite3_uint64)cap);
    if (p == 0) {
      b->rc = SQLITE_NOMEM;
      return 0;
    }
    b->text = p;
    b->captext = cap;
  }
  return 1;
}

static Tok *tok_new(Buf *b) {
  if (b->ntok == b->captok) {
    int cap = b->captok ? b->captok * 2 : 256;
    Tok *p = sqlite3_realloc64(b->toks, (sqlite3_uint64)cap * sizeof(Tok));
    if (p == 0) {
      b->rc = SQLITE_NOMEM;
      return 0;
    }
    b->toks = p;
    b->captok = cap;
  }
  return &b->toks[b->ntok++];
}

/* Append z[0..n) to the text buffer as Python would decode it with errors="replace" and encode
** it again; return its length in code points (-1: out of memory). *ascii says it was ASCII. */
static int append_text(Buf *b, const unsigned char *z, int n, int *ascii) {
  int i = 0, nchars = 0;
  char *out;
  if (!buf_reserve(b, (sqlite3_int64)n * 3)) return -1;
  out = b->text + b->ntext;
  if (is_ascii(z, n)) {
    memcpy(out, z, (size_t)n);
    b->ntext += n;
    if (ascii) *ascii = 1;
    return n;
  }
  if (ascii) *ascii = 0;
  while (i < n) {
    uint32_t cp;
    int k = utf8_next(z + i, n - i, &cp);
    if (k > 0) {
      memcpy(out, z + i, (size_t)k);
      out += k;
      i += k;
    } else {
      *out++ = (char)0xef;
      *out++ = (char)0xbf;
      *out++ = (char)0xbd;
      i += -k;
    }
    nchars++;
  }
  b->ntext = out - b->text;
  return nchars;
}

/* ---------------------------------------------------------------- the tokenizer */

typedef struct Hermes {
  fts5_tokenizer base;   /* unicode61 */
  Fts5Tokenizer *pBase;
  Buf buf;               /* reused across calls */
  int busy;              /* buf in use (a nested call gets its own) */
} Hermes;

typedef struct Collect {
  Buf *b;
  int shift;             /* added to the offsets (a run tokenized again) */
  int ascii;             /* the input is ASCII, so are the tokens (unicode61 folds ASCII to
                            ASCII) */
} Collect;

static int collect_token(void *pCtx, int tflags, const char *pToken, int nToken, int iStart,
                         int iEnd) {
  Collect *c = (Collect *)pCtx;
  Buf *b = c->b;
  Tok *t;
  int off, ascii = 0, nchars;
  (void)tflags;
  off = (int)b->ntext;
  if (c->ascii) {
    if (!buf_reserve(b, nToken)) return b->rc;
    memcpy(b->text + off, pToken, (size_t)nToken);
    b->ntext += nToken;
    nchars = nToken;
    ascii = 1;
  } else {
    nchars = append_text(b, (const unsigned char *)pToken, nToken, &ascii);
    if (nchars < 0) return b->rc;
  }
  t = tok_new(b);
  if (t == 0) return b->rc;
  t->start = iStart + c->shift;
  t->end = iEnd + c->shift;
  t->off = off;
  t->len = (int)b->ntext - off;
  t->nchars = nchars;
  t->ascii = ascii;
  t->clen = 0;
  return SQLITE_OK;
}

static int base_tokens(Hermes *h, Buf *b, int flags, const char *z, int n, int shift,
                       int ascii) {
  Collect c;
  int rc;
  c.b = b;
  c.shift = shift;
  c.ascii = ascii;
  rc = h->base.xTokenize(h->pBase, &c, flags, z, n, collect_token);
  if (rc == SQLITE_OK) rc = b->rc;
  return rc;
}

/* fts.py's _split_cjk_token: tokens first..end of b hold one unicode61 token's split pieces. */
static int split_cjk_token(Hermes *h, Buf *b, const unsigned char *z, const Tok *token,
                           int flags) {
  int i = token->start, n = token->end;
  /* A token that is not UTF-8 stays as it is. */
  while (i < n) {
    uint32_t cp;
    int k = utf8_next(z + i, n - i, &cp);
    if (k < 0) {
      Tok *t = tok_new(b);
      if (t == 0) return b->rc;
      *t = *token;
      return SQLITE_OK;
    }
    i += k;
  }
  i = token->start;
  while (i < n) {
    uint32_t cp;
    int k = utf8_next(z + i, n - i, &cp);
    if (is_cjk(cp)) {
      Tok *t;
      int off = (int)b->ntext;
      if (!buf_reserve(b, k)) return b->rc;
      memcpy(b->text + off, z + i, (size_t)k);
      b->ntext += k;
      t = tok_new(b);
      if (t == 0) return b->rc;
      t->start = i;
      t->end = i + k;
      t->off = off;
      t->len = k;
      t->nchars = 1;
      t->ascii = 0;
      t->clen = 0;
      i += k;
    } else {
      int run = i, rc;
      while (i < n) {
        k = utf8_next(z + i, n - i, &cp);
        if (is_cjk(cp)) break;
        i += k;
      }
      rc = base_tokens(h, b, flags, (const char *)z + run, i - run, run, 0);
      if (rc != SQLITE_OK) return rc;
    }
  }
  return SQLITE_OK;
}

/* fts.py's _split_tokens: tokens [0, nbase) of b are unicode61's; the result is appended. */
static int split_tokens(Hermes *h, Buf *b, const unsigned char *z, int nbase, int flags) {
  int i;
  for (i = 0; i < nbase; i++) {
    Tok token = b->toks[i];
    const unsigned char *text = (const unsigned char *)b->text + token.off;
    Tok *t;
    int all_cjk = 0, any_cjk = 0, j = 0;
    if (!token.ascii) {
      all_cjk = 1;
      while (j < token.len) {
        uint32_t cp;
        int k = utf8_next(text + j, token.len - j, &cp);
        /* Texts are valid UTF-8 (append_text); an invalid byte would count as not CJK. */
        if (k < 0) {
          k = -k;
          cp = 0xfffd;
        }
        if (is_cjk(cp)) {
          any_cjk = 1;
        } else {
          all_cjk = 0;
        }
        j += k;
      }
    }
    if (token.ascii || !any_cjk) {
      t = tok_new(b);
      if (t == 0) return b->rc;
      *t = token;
    } else if (all_cjk && token.end - token.start == 3 * token.nchars) {
      int k, pos = 0;
      for (k = 0; k < token.nchars; k++) {
        uint32_t cp;
        int size = utf8_next(text + pos, token.len - pos, &cp);
        t = tok_new(b);
        if (t == 0) return b->rc;
        t->start = token.start + 3 * k;
        t->end = t->start + 3;
        t->off = token.off + pos;
        t->len = size;
        t->nchars = 1;
        t->ascii = 0;
        t->clen = 0;
        pos += size;
      }
    } else {
      int rc = split_cjk_token(h, b, z, &token, flags);
      if (rc != SQLITE_OK) return rc;
    }
  }
  return SQLITE_OK;
}

/* fts.py's _joined: the text between two tokens is 1 to JOINER_BYTES bytes with no space. */
static int joined(const unsigned char *z, int end, int start) {
  int i;
  if (start - end == 1) return !is_ascii_space(z[end]);
  if (start - end < 1 || start - end > JOINER_BYTES) return 0;
  for (i = end; i < start; i++) {
    if (is_ascii_space(z[i])) return 0;
  }
  if (is_ascii(z + end, start - end)) return 1;
  i = end;
  while (i < start) {
    uint32_t cp;
    int k = utf8_next(z + i, start - i, &cp);
    if (k > 0) {
      if (is_py_space(cp)) return 0;
      i += k;
    } else {
      i += -k;
    }
  }
  return 1;
}

/* fts.py's _may_have_runs on an ASCII text: a letter or digit, one to three bytes that are
** neither letters, digits nor ASCII space, and a letter or digit. */
static int may_have_runs(const unsigned char *z, int n) {
  int i, gap = 0, after_alnum = 0;
  for (i = 0; i < n; i++) {
    unsigned c = z[i];
    int alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alnum) {
      if (after_alnum && gap >= 1 && gap <= 3) return 1;
      after_alnum = 1;
      gap = 0;
    } else if (is_ascii_space(c)) {
      after_alnum = 0;
      gap = 0;
    } else if (after_alnum) {
      gap++;
    }
  }
  return 0;
}

/* fts.py's joined_text for tokens [first, end) of b, appended to the text buffer. */
static int joined_text(Buf *b, const unsigned char *z, int first, int end, Tok *out) {
  int off = (int)b->ntext, size, i, nchars;
  const Tok *t0 = &b->toks[first];
  if (!buf_reserve(b, 1 + t0->len)) return b->rc;
  b->text[b->ntext++] = MARK;
  memcpy(b->text + b->ntext, b->text + t0->off, (size_t)t0->len);
  b->ntext += t0->len;
  size = t0->nchars;
  for (i = first + 1; i < end && size < IDENTIFIER_CHARS; i++) {
    const Tok *prev = &b->toks[i - 1], *t = &b->toks[i];
    int gap = append_text(b, z + prev->end, t->start - prev->end, 0);
    if (gap < 0) return b->rc;
    if (!buf_reserve(b, t->len)) return b->rc;
    memcpy(b->text + b->ntext, b->text + t->off, (size_t)t->len);
    b->ntext += t->len;
    size += gap + t->nchars;
  }
  /* Cut at IDENTIFIER_CHARS code points after the mark. */
  if (size > IDENTIFIER_CHARS) {
    int pos = off + 1;
    for (nchars = 0; nchars < IDENTIFIER_CHARS; nchars++) {
      unsigned c = (unsigned char)b->text[pos];
      pos += c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    }
    b->ntext = pos;
  }
  out->coff = off;
  out->clen = (int)b->ntext - off;
  return SQLITE_OK;
}

/* fts.py's runs and with_identifiers over tokens [first, end) of b. */
static int with_identifiers(Buf *b, const unsigned char *z, int n, int ascii, int first,
                            int end) {
  int i, run = first, prev_end, checked = 0;
  if (end - first < 2) return SQLITE_OK;
  prev_end = b->toks[first].end;
  for (i = first + 1; i <= end; i++) {
    int is_joined = i < end && joined(z, prev_end, b->toks[i].start);
    if (i < end) prev_end = b->toks[i].end;
    if (!is_joined) {
      if (i - run >= 2) {
        int k;
        if (!checked) {
          checked = 1;
          if (ascii && !may_have_runs(z, n)) return SQLITE_OK;
        }
        for (k = run; k < i - 1; k++) {
          int rc = joined_text(b, z, k, i, &b->toks[k]);
          if (rc != SQLITE_OK) return rc;
        }
      }
      run = i;
    }
  }
  return SQLITE_OK;
}

static int hermes_tokenize(Fts5Tokenizer *pTok, void *pCtx, int flags, const char *pText,
                           int nText,
                           int (*xToken)(void *, int, const char *, int, int, int)) {
  Hermes *h = (Hermes *)pTok;
  const unsigned char *z = (const unsigned char *)pText;
  Buf local, *b;
  int rc, i, first = 0, end, ascii;
  if (nText <= 0 || pText == 0) return SQLITE_OK;
  memset(&local, 0, sizeof(local));
  if (h->busy) {
    b = &local;
  } else {
    b = &h->buf;
    h->busy = 1;
  }
  b->ntok = 0;
  b->ntext = 0;
  b->rc = SQLITE_OK;

  if (z[0] == MARK && (flags & FTS5_TOKENIZE_QUERY)) {
    if (append_text(b, z, nText, 0) < 0) {
      rc = b->rc;
    } else {
      rc = xToken(pCtx, 0, b->text, (int)b->ntext, 0, nText);
    }
    goto done;
  }
  ascii = is_ascii(z, nText);
  rc = base_tokens(h, b, flags, pText, nText, 0, ascii);
  if (rc != SQLITE_OK) goto done;
  end = b->ntok;
  if (!ascii) {
    first = end;
    rc = split_tokens(h, b, z, end, flags);
    if (rc != SQLITE_OK) goto done;
    end = b->ntok;
  }
  if ((flags & FTS5_TOKENIZE_DOCUMENT) && end - first > 1) {
    rc = with_identifiers(b, z, nText, ascii, first, end);
    if (rc != SQLITE_OK) goto done;
  }
  for (i = first; i < end && rc == SQLITE_OK; i++) {
    const Tok *t = &b->toks[i];
    rc = xToken(pCtx, 0, b->text + t->off, t->len, t->start, t->end);
    if (rc == SQLITE_OK && t->clen) {
      rc = xToken(pCtx, FTS5_TOKEN_COLOCATED, b->text + t->coff, t->clen, t->start, t->end);
    }
  }
done:
  if (b == &local) {
    sqlite3_free(local.toks);
    sqlite3_free(local.text);
  } else {
    h->busy = 0;
    /* Do not keep a huge document's buffers. */
    if (b->captext > (1 << 20) || b->captok > (1 << 16)) {
      sqlite3_free(b->toks);
      sqlite3_free(b->text);
      memset(b, 0, sizeof(*b));
    }
  }
  return rc;
}

static void hermes_delete(Fts5Tokenizer *pTok) {
  Hermes *h = (Hermes *)pTok;
  if (h == 0) return;
  if (h->pBase) h->base.xDelete(h->pBase);
  sqlite3_free(h->buf.toks);
  sqlite3_free(h->buf.text);
  sqlite3_free(h);
}

static int hermes_create(void *pCtx, const char **azArg, int nArg, Fts5Tokenizer **ppOut) {
  fts5_api *api = (fts5_api *)pCtx;
  Hermes *h;
  void *pUser = 0;
  const char **args;
  int rc, i;
  *ppOut = 0;
  h = sqlite3_malloc(sizeof(Hermes));
  if (h == 0) return SQLITE_NOMEM;
  memset(h, 0, sizeof(*h));
  rc = api->xFindTokenizer(api, "unicode61", &pUser, &h->base);
  if (rc != SQLITE_OK) {
    sqlite3_free(h);
    return rc;
  }
  args = sqlite3_malloc64((sqlite3_uint64)(nArg + 2) * sizeof(char *));
  if (args == 0) {
    sqlite3_free(h);
    return SQLITE_NOMEM;
  }
  args[0] = "remove_diacritics";
  args[1] = "2";
  for (i = 0; i < nArg; i++) args[i + 2] = azArg[i];
  rc = h->base.xCreate(pUser, args, nArg + 2, &h->pBase);
  sqlite3_free(args);
  if (rc != SQLITE_OK) {
    sqlite3_free(h);
    return rc;
  }
  *ppOut = (Fts5Tokenizer *)h;
  return SQLITE_OK;
}

/* ------------------------------------------------------ search: a row's length, term counts */

/* hermes_term_counts(messages_fts, [phrases of term 1, phrases of term 2, ...]): the FTS5
** auxiliary function the bounded search scores its window with (hermes_es/queries/bm25.py,
** _Frequencies is the Python one and the reference: the same values). One term (at most one
** argument after the table): length << 32 | instances of every phrase. Two terms of at most
** 65535 instances each (and a length below 2^31): -(length << 32 | c1 << 16 | c2) - 1. More:
** the text "length c1 c2 ...". A term's count is the instances of its phrases (its argument
** says how many consecutive phrases of the query it has). */
static void counts_result(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                          sqlite3_int64 length, int nVal, sqlite3_value **apVal) {
  int nInst = 0, nPhrase, rc, i, t, phrase;
  sqlite3_int64 counts[2];
  int local[16];
  int *per = local;
  sqlite3_str *out;
  rc = api->xInstCount(fts, &nInst);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  if (nVal <= 1) {
    sqlite3_result_int64(ctx, (length << 32) | (sqlite3_int64)(unsigned)nInst);
    return;
  }
  nPhrase = api->xPhraseCount(fts);
  if (nPhrase > 16) {
    per = sqlite3_malloc64((sqlite3_uint64)nPhrase * sizeof(int));
    if (per == 0) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
  }
  memset(per, 0, (size_t)nPhrase * sizeof(int));
  for (i = 0; i < nInst && rc == SQLITE_OK; i++) {
    int ip = 0, ic = 0, io = 0;
    rc = api->xInst(fts, i, &ip, &ic, &io);
    if (rc == SQLITE_OK && ic == 0 && ip >= 0 && ip < nPhrase) per[ip]++;
  }
  if (rc != SQLITE_OK) {
    if (per != local) sqlite3_free(per);
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  out = sqlite3_str_new(0);
  sqlite3_str_appendf(out, "%lld", length);
  phrase = 0;
  for (t = 0; t < nVal; t++) {
    int n = sqlite3_value_int(apVal[t]);
    sqlite3_int64 count = 0;
    for (i = phrase; i < phrase + n && i < nPhrase; i++) count += per[i];
    phrase += n;
    if (t < 2) counts[t] = count;
    sqlite3_str_appendf(out, " %lld", count);
  }
  if (per != local) sqlite3_free(per);
  if (nVal == 2 && length < ((sqlite3_int64)1 << 31) && counts[0] <= 0xFFFF &&
      counts[1] <= 0xFFFF) {
    sqlite3_free(sqlite3_str_finish(out));
    sqlite3_result_int64(ctx, -((length << 32) | (counts[0] << 16) | counts[1]) - 1);
    return;
  }
  rc = sqlite3_str_errcode(out);
  if (rc != SQLITE_OK) {
    sqlite3_free(sqlite3_str_finish(out));
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  sqlite3_result_text(ctx, sqlite3_str_finish(out), -1, sqlite3_free);
}

static void term_counts(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                        int nVal, sqlite3_value **apVal) {
  int size = 0;
  int rc = api->xColumnSize(fts, 0, &size);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  counts_result(api, fts, ctx, size, nVal, apVal);
}

/* A row's length in tokens (column: one column; -1: every column) from its %_docsize blob, the
** value xColumnSize returns: the blob is one SQLite varint per column. 0 when v is not such a blob (the caller
** asks FTS5 then). FTS5 reads the blob through a statement of its own, reset and stepped for
** every row (~0.5 us a row, the main cost of scoring a window); the search hands it over from
** a correlated subquery of the same statement instead, whose cursor stays open (~0.1 us). */
static int docsize_length(sqlite3_value *v, int column, sqlite3_int64 *length) {
  const unsigned char *p;
  int n, i = 0, c = 0;
  sqlite3_int64 total = 0;
  if (sqlite3_value_type(v) != SQLITE_BLOB) return 0;
  p = (const unsigned char *)sqlite3_value_blob(v);
  n = sqlite3_value_bytes(v);
  if (p == 0 || n <= 0) return 0;
  while (i < n) {
    sqlite3_uint64 x = 0;
    int k;
    for (k = 0; k < 9; k++) {
      if (i >= n) return 0;
      if (k == 8) {
        x = (x << 8) | p[i++];
        break;
      }
      x = (x << 7) | (p[i] & 0x7f);
      if (p[i++] < 0x80) break;
    }
    if (column < 0 || c == column) total += (sqlite3_int64)(int)(unsigned)x; /* an int each */
    c++;
  }
  if (column >= c) return 0;
  *length = total;
  return 1;
}

/* The row's length in tokens (column: one column; -1: every column) from sz, the function's
** first argument (its messages_fts_docsize blob), else from FTS5's own look-up (no argument,
** or one that is no such blob). */
static int row_length(const Fts5ExtensionApi *api, Fts5Context *fts, int nVal,
                      sqlite3_value **apVal, int column, sqlite3_int64 *length) {
  int size = 0, rc;
  if (nVal >= 1 && docsize_length(apVal[0], column, length)) return SQLITE_OK;
  rc = api->xColumnSize(fts, column, &size);
  *length = size;
  return rc;
}

/* hermes_sized_counts(messages_fts, sz, [phrases of term 1, ...]): hermes_term_counts' value,
** the row's length read from sz (its messages_fts_docsize blob; anything else: from FTS5). */
static void sized_counts(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                         int nVal, sqlite3_value **apVal) {
  sqlite3_int64 length = 0;
  int rc = row_length(api, fts, nVal, apVal, 0, &length);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  counts_result(api, fts, ctx, length, nVal - 1, apVal + 1);
}

/* ------------------------------------------------------------ search: bm25 with a known size */

typedef struct Bm25 {
  int nPhrase;
  double avgdl;
  double *idf;
  double *freq;
} Bm25;

/* bm25's idf of a phrase matching hits of rows, as FTS5 computes it (1e-6 where it is not
** positive). (double)rows - hits: bm25()'s integer difference for a count (exact below 2^53),
** and bm25.py's float one for an estimate (float rows and hits). */
static double bm25_idf(sqlite3_int64 rows, double hits) {
  double idf = log(((double)rows - hits + 0.5) / (hits + 0.5));
  return idf <= 0.0 ? 1e-6 : idf;
}

static int count_row(const Fts5ExtensionApi *api, Fts5Context *fts, void *p) {
  (void)api;
  (void)fts;
  (*(sqlite3_int64 *)p)++;
  return SQLITE_OK;
}

/* The query's statistics, as FTS5's bm25() gathers them: rows, tokens, each phrase's rows
** (given: nGiven integer values, one a phrase, the rows the caller counted already; else each
** phrase's matches are walked, as bm25() does). */
static Bm25 *bm25_data(const Fts5ExtensionApi *api, Fts5Context *fts, int *rc, int nGiven,
                       sqlite3_value **given) {
  Bm25 *d = (Bm25 *)api->xGetAuxdata(fts, 0);
  sqlite3_int64 rows = 0, tokens = 0;
  int i, n;
  if (d) return d;
  n = api->xPhraseCount(fts);
  d = (Bm25 *)sqlite3_malloc64(sizeof(Bm25) + (sqlite3_uint64)n * 2 * sizeof(double));
  if (d == 0) {
    *rc = SQLITE_NOMEM;
    return 0;
  }
  memset(d, 0, sizeof(Bm25) + (size_t)n * 2 * sizeof(double));
  d->nPhrase = n;
  d->idf = (double *)&d[1];
  d->freq = &d->idf[n];
  *rc = api->xRowCount(fts, &rows);
  if (*rc == SQLITE_OK) *rc = api->xColumnTotalSize(fts, -1, &tokens);
  if (*rc == SQLITE_OK) d->avgdl = (double)tokens / (double)rows;
  if (nGiven != n) nGiven = 0;
  for (i = 0; i < nGiven; i++) {
    int type = sqlite3_value_type(given[i]);
    if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) nGiven = 0;
  }
  for (i = 0; *rc == SQLITE_OK && i < n; i++) {
    sqlite3_int64 counted = 0;
    double hits = 0.0;
    if (nGiven) hits = sqlite3_value_double(given[i]);
    else *rc = api->xQueryPhrase(fts, i, &counted, count_row);
    if (!nGiven) hits = (double)counted;
    if (*rc == SQLITE_OK) d->idf[i] = bm25_idf(rows, hits);
  }
  if (*rc == SQLITE_OK) *rc = api->xSetAuxdata(fts, d, sqlite3_free);
  else sqlite3_free(d);
  return *rc == SQLITE_OK ? d : 0;
}

/* hermes_bm25(messages_fts, sz, [rows of phrase 1, ...]): FTS5's bm25(messages_fts) (k1 1.2,
** b 0.75, every column of weight 1), the same floating-point operations in the same order, so
** the same value to the bit (tests/queries/test_compiled_search.py checks), with the row's
** length read from sz (its messages_fts_docsize blob; anything else: from FTS5) instead of
** FTS5's per-row look-up, and each phrase's matching rows, when given for every phrase as
** numbers (an integer count, or a real estimate as queries/bm25.py makes it), taken instead
** of counted (the search counts them cheaper: a one-word query's
** count it made anyway, a word's rows in the fts5vocab table). FTS5 keeps one auxiliary
** data per function and cursor: calls of one statement share the first call's statistics. */
static void bm25_sized(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                       int nVal, sqlite3_value **apVal) {
  const double k1 = 1.2, b = 0.75;
  double score = 0.0, D;
  sqlite3_int64 length = 0;
  int rc = SQLITE_OK, nInst = 0, i;
  Bm25 *d = bm25_data(api, fts, &rc, nVal - 1, apVal + 1);
  if (d) {
    memset(d->freq, 0, sizeof(double) * (size_t)d->nPhrase);
    rc = api->xInstCount(fts, &nInst);
  }
  for (i = 0; rc == SQLITE_OK && i < nInst; i++) {
    int ip = 0, ic = 0, io = 0;
    rc = api->xInst(fts, i, &ip, &ic, &io);
    if (rc == SQLITE_OK && ip >= 0 && ip < d->nPhrase) d->freq[ip] += 1.0;
  }
  if (rc == SQLITE_OK) rc = row_length(api, fts, nVal, apVal, -1, &length);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  D = (double)length;
  for (i = 0; i < d->nPhrase; i++) {
    score += d->idf[i] * ((d->freq[i] * (k1 + 1.0)) /
                          (d->freq[i] + k1 * (1 - b + b * D / d->avgdl)));
  }
  sqlite3_result_double(ctx, -1.0 * score);
}

/* hermes_bm25_term(messages_fts, sz, rows): bm25 of a query that is one term matched through
** several phrases (a short prefix, "co" OR "co0"* OR ...: queries/bm25.py's expansion), as the
** window plan scores it: the row's instances of every phrase counted together as the term's
** frequency, one idf from the term's rows (rows: a count or an estimate, required), k1 1.2 and
** b 0.75, the same floating-point operations as bm25.py's _one_term_scores, so the same float.
** The length is read from sz as hermes_bm25 reads it. */
typedef struct TermBm25 {
  double avgdl;
  double idf;
} TermBm25;

static void bm25_term(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                      int nVal, sqlite3_value **apVal) {
  const double k1 = 1.2, b = 0.75;
  double f, D;
  sqlite3_int64 length = 0;
  int rc = SQLITE_OK, nInst = 0;
  TermBm25 *d = (TermBm25 *)api->xGetAuxdata(fts, 0);
  if (d == 0) {
    sqlite3_int64 rows = 0, tokens = 0;
    int type = nVal >= 2 ? sqlite3_value_type(apVal[1]) : SQLITE_NULL;
    if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) {
      sqlite3_result_error(ctx, "hermes_bm25_term: the term's rows must be a number", -1);
      return;
    }
    rc = api->xRowCount(fts, &rows);
    if (rc == SQLITE_OK) rc = api->xColumnTotalSize(fts, -1, &tokens);
    if (rc != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    d = (TermBm25 *)sqlite3_malloc(sizeof(TermBm25));
    if (d == 0) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
    d->avgdl = (double)tokens / (double)rows;
    d->idf = bm25_idf(rows, sqlite3_value_double(apVal[1]));
    rc = api->xSetAuxdata(fts, d, sqlite3_free);
    if (rc != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
  }
  rc = api->xInstCount(fts, &nInst);
  if (rc == SQLITE_OK) rc = row_length(api, fts, nVal, apVal, -1, &length);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  f = (double)nInst;
  D = (double)length;
  sqlite3_result_double(ctx,
                        -(d->idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * D / d->avgdl)))));
}

/* ------------------------------------------------------------------- search: snippets */

/* hermes_snippet(text, exact, prefixes, size): snippets.py's Highlighter.snippet (its
** reference: the same text) without Python: about size tokens of text around its first hit,
** each hit wrapped in 0x02 ... 0x03 (adjacent hits in one pair), "…" where text was cut. A
** token is a hit when it equals one of exact's tokens or starts with one of prefixes'
** (each a list of query tokens separated by 0x1e, a byte no token holds). The tokens are the
** hermes tokenizer's in document mode without the colocated identifier tokens: the plain
** tokens snippets.py cuts with. Text without a token: its first 120 characters. size is at
** least 1 (the search asks for 16). */

typedef struct SnipTok {
  int start, end;
  int off, len; /* token text in SnipCollect.text */
} SnipTok;

typedef struct SnipCollect {
  SnipTok *toks;
  int ntok, captok;
  char *text;
  sqlite3_int64 ntext, captext;
  int rc;
} SnipCollect;

typedef struct Snipper {
  fts5_api *api;
  Fts5Tokenizer *tok; /* a hermes tokenizer of this connection's own, made on first use */
} Snipper;

static int snip_token(void *pCtx, int tflags, const char *pToken, int nToken, int iStart,
                      int iEnd) {
  SnipCollect *c = (SnipCollect *)pCtx;
  SnipTok *t;
  if (tflags & FTS5_TOKEN_COLOCATED) return SQLITE_OK;
  if (c->ntok == c->captok) {
    int cap = c->captok ? c->captok * 2 : 64;
    SnipTok *p = sqlite3_realloc64(c->toks, (sqlite3_uint64)cap * sizeof(SnipTok));
    if (p == 0) return c->rc = SQLITE_NOMEM;
    c->toks = p;
    c->captok = cap;
  }
  if (c->ntext + nToken > c->captext) {
    sqlite3_int64 cap = c->captext ? c->captext * 2 : 1024;
    char *p;
    while (cap < c->ntext + nToken) cap *= 2;
    p = sqlite3_realloc64(c->text, (sqlite3_uint64)cap);
    if (p == 0) return c->rc = SQLITE_NOMEM;
    c->text = p;
    c->captext = cap;
  }
  memcpy(c->text + c->ntext, pToken, (size_t)nToken);
  t = &c->toks[c->ntok++];
  t->start = iStart;
  t->end = iEnd;
  t->off = (int)c->ntext;
  t->len = nToken;
  c->ntext += nToken;
  return SQLITE_OK;
}

/* Whether the token (z, n) is in the 0x1e-separated list (prefix: starts with one of it). */
static int in_list(const char *z, int n, const unsigned char *list, int nlist, int prefix) {
  int i = 0;
  while (i < nlist) {
    int j = i;
    while (j < nlist && list[j] != 0x1e) j++;
    if (prefix ? (j - i <= n && memcmp(z, list + i, (size_t)(j - i)) == 0)
               : (j - i == n && memcmp(z, list + i, (size_t)n) == 0)) {
      return 1;
    }
    i = j + 1;
  }
  return 0;
}

typedef struct Out {
  char *p;
  sqlite3_int64 n, cap;
  int oom;
} Out;

static void out_add(Out *o, const void *z, sqlite3_int64 n) {
  if (o->oom || n <= 0) return;
  if (o->n + n > o->cap) {
    sqlite3_int64 cap = o->cap ? o->cap * 2 : 256;
    char *p;
    while (cap < o->n + n) cap *= 2;
    p = sqlite3_realloc64(o->p, (sqlite3_uint64)cap);
    if (p == 0) {
      o->oom = 1;
      return;
    }
    o->p = p;
    o->cap = cap;
  }
  memcpy(o->p + o->n, z, (size_t)n);
  o->n += n;
}

static void snippet_function(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  Snipper *sn = (Snipper *)sqlite3_user_data(ctx);
  const unsigned char *z, *exact, *prefixes;
  int n, nexact, nprefix, size, rc, i, first, lo, hi, start, end, pos, hits = 0;
  SnipCollect c;
  Out out;
  char *hit;
  (void)argc;
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return; /* NULL */
  z = sqlite3_value_text(argv[0]);
  n = sqlite3_value_bytes(argv[0]);
  exact = sqlite3_value_text(argv[1]);
  nexact = sqlite3_value_bytes(argv[1]);
  prefixes = sqlite3_value_text(argv[2]);
  nprefix = sqlite3_value_bytes(argv[2]);
  size = sqlite3_value_int(argv[3]);
  if (z == 0 || exact == 0 || prefixes == 0) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (sn->tok == 0) {
    rc = hermes_create(sn->api, 0, 0, &sn->tok);
    if (rc != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
  }
  memset(&c, 0, sizeof(c));
  memset(&out, 0, sizeof(out));
  rc = hermes_tokenize(sn->tok, &c, FTS5_TOKENIZE_DOCUMENT, (const char *)z, n, snip_token);
  if (rc == SQLITE_OK) rc = c.rc;
  if (rc != SQLITE_OK) {
    sqlite3_free(c.toks);
    sqlite3_free(c.text);
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  if (c.ntok == 0) { /* the first 120 characters */
    int k = 0, chars = 0;
    while (k < n && chars < 120) {
      k++;
      while (k < n && (z[k] & 0xc0) == 0x80) k++;
      chars++;
    }
    sqlite3_result_text(ctx, (const char *)z, k, SQLITE_TRANSIENT);
    return;
  }
  hit = sqlite3_malloc64((sqlite3_uint64)c.ntok);
  if (hit == 0) {
    sqlite3_free(c.toks);
    sqlite3_free(c.text);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  first = -1;
  for (i = 0; i < c.ntok; i++) {
    const char *t = c.text + c.toks[i].off;
    int len = c.toks[i].len;
    hit[i] = (char)(in_list(t, len, exact, nexact, 0) ||
                    (nprefix > 0 && in_list(t, len, prefixes, nprefix, 1)));
    if (hit[i] && first < 0) first = i;
  }
  if (first < 0) first = 0;
  lo = first - size / 4;
  if (lo > c.ntok - size) lo = c.ntok - size;
  if (lo < 0) lo = 0;
  hi = lo + size < c.ntok ? lo + size : c.ntok;
  start = lo == 0 ? 0 : c.toks[lo].start;
  end = hi == c.ntok ? n : (hi > 0 ? c.toks[hi - 1].end : 0);
  if (lo) out_add(&out, "\xe2\x80\xa6", 3);
  pos = start;
  for (i = lo; i < hi; i++) {
    int a = c.toks[i].start, b = c.toks[i].end;
    if (!hit[i]) continue;
    if (a == pos && hits && !out.oom) {
      out.n--; /* extend the hit just closed: drop its 0x03 */
    } else {
      out_add(&out, z + pos, a - pos);
      out_add(&out, "\x02", 1);
    }
    out_add(&out, z + a, b - a);
    out_add(&out, "\x03", 1);
    pos = b;
    hits++;
  }
  out_add(&out, z + pos, end - pos);
  if (hi < c.ntok) out_add(&out, "\xe2\x80\xa6", 3);
  sqlite3_free(hit);
  sqlite3_free(c.toks);
  sqlite3_free(c.text);
  if (out.oom) {
    sqlite3_free(out.p);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (out.n == 0) {
    sqlite3_free(out.p);
    sqlite3_result_text(ctx, "", 0, SQLITE_STATIC);
    return;
  }
  sqlite3_result_text64(ctx, out.p, (sqlite3_uint64)out.n, sqlite3_free, SQLITE_UTF8);
}

static void snipper_delete(void *p) {
  Snipper *sn = (Snipper *)p;
  if (sn == 0) return;
  if (sn->tok) hermes_delete(sn->tok);
  sqlite3_free(sn);
}

/* SELECT hermes_tokenizer_build(): 'c' on a connection with this tokenizer. */
static void build_function(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_text(ctx, "c", 1, SQLITE_STATIC);
}

/* hermes_event_text and hermes_text_dictionary: _hermes_text.c. */
int hermes_text_register(sqlite3 *db);

static fts5_api *find_fts5_api(sqlite3 *db) {
  fts5_api *api = 0;
  sqlite3_stmt *stmt = 0;
  if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &stmt, 0) == SQLITE_OK) {
    sqlite3_bind_pointer(stmt, 1, (void *)&api, "fts5_api_ptr", 0);
    sqlite3_step(stmt);
  }
  sqlite3_finalize(stmt);
  return api;
}

#ifdef _WIN32
__declspec(dllexport)
#else
__attribute__((visibility("default")))
#endif
int sqlite3_hermesfts_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  static fts5_tokenizer tokenizer = {hermes_create, hermes_delete, hermes_tokenize};
  fts5_api *api;
  int rc;
  SQLITE_EXTENSION_INIT2(pApi);
  api = find_fts5_api(db);
  if (api == 0 || api->iVersion < 2) {
    *pzErrMsg = sqlite3_mprintf("hermes tokenizer: this SQLite has no FTS5 API");
    return SQLITE_ERROR;
  }
  rc = api->xCreateTokenizer(api, "hermes", (void *)api, &tokenizer, 0);
  if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "hermes_term_counts", 0, term_counts, 0);
  if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "hermes_sized_counts", 0, sized_counts, 0);
  if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "hermes_bm25", 0, bm25_sized, 0);
  if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "hermes_bm25_term", 0, bm25_term, 0);
  if (rc == SQLITE_OK) {
    Snipper *sn = sqlite3_malloc(sizeof(Snipper));
    if (sn == 0) return SQLITE_NOMEM;
    sn->api = api;
    sn->tok = 0;
    rc = sqlite3_create_function_v2(db, "hermes_snippet", 4,
                                    SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, sn,
                                    snippet_function, 0, 0, snipper_delete);
  }
  if (rc == SQLITE_OK) {
    rc = sqlite3_create_function(db, "hermes_tokenizer_build", 0,
                                 SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, 0,
                                 build_function, 0, 0);
  }
  if (rc == SQLITE_OK) rc = hermes_text_register(db);
  return rc;
}
