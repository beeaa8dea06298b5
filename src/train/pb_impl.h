/* Internal to src/train/: a small Protocol Buffers encoder, enough to write the messages of
 * ONNX (onnx.c) without a generated code layer.
 *
 * Wire format (protobuf.dev, "Encoding"): a message is a sequence of fields, each a key
 * varint (field_number << 3 | wire_type) followed by the value: wire type 0 a varint (int32,
 * int64, enums; negative values as 10-byte two's complement), 5 four little-endian bytes
 * (float), 2 a varint length then that many bytes (strings, bytes, packed repeated scalars,
 * nested messages); a repeated scalar is one such field per element (proto2's unpacked form,
 * which onnx.proto declares). Varints are little-endian base-128, 7 bits a byte, the high bit set on
 * every byte but the last.
 *
 * A rec__pb is a growable byte buffer. Writers never fail on their own: an allocation failure
 * sets `oom`, later writes are dropped, and the owner checks `oom` once at the end (one check
 * instead of one per field). A nested message is written between rec__pb_begin and
 * rec__pb_end: begin writes the key and reserves the longest length varint, end writes the
 * real length and moves the body back over the unused reserve, so the bytes are the canonical
 * encoding (the shortest varint), as protobuf's own serializers give. Meant for small
 * messages: a large payload (a weight table) is better counted and streamed by its owner. */
#ifndef REC_PB_IMPL_H
#define REC_PB_IMPL_H

#include <stddef.h>
#include <stdint.h>

enum { REC_PB_VARINT = 0, REC_PB_I64 = 1, REC_PB_LEN = 2, REC_PB_I32 = 5 };

typedef struct rec__pb {
    uint8_t *p;   /* (n) bytes written, owned */
    size_t n, cap;
    int oom;      /* an allocation failed; the bytes are incomplete */
} rec__pb;

void rec__pb_free(rec__pb *b);
/* Bytes of v as a varint (1..10). */
size_t rec__pb_varint_len(uint64_t v);
void rec__pb_raw(rec__pb *b, const void *data, size_t n);
void rec__pb_varint(rec__pb *b, uint64_t v);
void rec__pb_key(rec__pb *b, int field, int wire);
/* Fields: int64/int32/enum (wire 0), float (wire 5), bytes and strings (wire 2). */
void rec__pb_int(rec__pb *b, int field, int64_t v);
void rec__pb_float(rec__pb *b, int field, float v);
void rec__pb_bytes(rec__pb *b, int field, const void *data, size_t n);
void rec__pb_str(rec__pb *b, int field, const char *s);
/* A nested message: begin returns a mark to pass to end; fields written between the two are
 * the message's. Nesting is allowed (ends in reverse order of begins). */
size_t rec__pb_begin(rec__pb *b, int field);
void rec__pb_end(rec__pb *b, size_t mark);

#endif
