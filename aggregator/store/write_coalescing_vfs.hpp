// An SQLite VFS over the default one that coalesces consecutive writes of a file into one write system call.
//
// Why: SQLite writes a WAL frame as two pwrite() calls (24-byte header, then the page) and a checkpoint
// copies page by page, one pwrite() each. On this kind of machine (a VM, ext4) a small write costs several
// microseconds of CPU however little it carries; measured with the WAL's pattern, 4 KiB frames written one
// call each cost ~7.5 us of CPU per frame when appending and ~4 us when overwriting, against ~3 and ~1.8 us
// written 50 frames per call. The ingest committer writes ~1.5 frames per batch and the checkpointer copies
// ~1.2 pages per batch, so this was a fifth of the daemon's CPU per record.
//
// How: a file opened through it (main database or WAL) keeps the writes that extend or overwrite its
// pending run in memory (up to 124 KiB) and hands the run to the real file in one write before anything else
// touches the file: a read, sync, truncate, size query, lock change, file control (a checkpoint signals its
// end with one, before it publishes what it copied) or shared-memory call, or a write elsewhere.
//
// Durability and visibility do not change, because nothing is durable before a sync and every sync flushes
// first, in order. One requirement: a connection that writes through it commits with synchronous=FULL (the
// WAL is synced, and so flushed, at every commit, before the commit is published in the WAL index); frames
// of a transaction not yet committed are invisible to other connections, and the writer's own reads flush
// first. The store's writers always use FULL (store.cpp); the checkpointer's database writes are flushed by
// the file control that ends every checkpoint's copy.
#pragma once

namespace netprism::store {

// Registers the VFS on first use (thread-safe) and returns its name, for sqlite3_open_v2().
const char* write_coalescing_vfs();

}  // namespace netprism::store
