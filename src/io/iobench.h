// `bcdtrain iobench`: sequential read or write throughput of one file through an IoEngine, the
// number scripts/bench_io.sh compares with fio. Everything the CLI needs is declared here.
#pragma once

#include <cstdint>
#include <string>

#include "base/bytes.h"      // parse_bytes for --size / --block-size
#include "io/io_engine.h"  // parse_io_op (--mode), parse_engine_kind (--engine)

namespace bcd {

struct IoBenchOptions {
  std::string path;                       // directory for the test file, <path>/bcd-iobench.dat
  uint64_t size = 2ull << 30;             // file size: bytes moved per pass; multiple of 4 KiB
  uint64_t block_size = 1 << 20;          // bytes per request; multiple of 4 KiB, up to 1 GiB
  unsigned queue_depth = 8;               // requests in flight
  IoOp mode = IoOp::kRead;                // sequential read or write
  EngineKind engine = EngineKind::kAuto;  // io_uring, else the thread pool (one stderr line why)
  bool direct = true;                     // O_DIRECT; false (--buffered) goes through the page cache
  unsigned loops = 1;                     // passes over the file, at least
  double seconds = 0;                     // and keep making passes until this many seconds went by
};

struct IoBenchResult {
  IoOp mode = IoOp::kRead;
  EngineKind engine = EngineKind::kThreads;  // the engine that ran (kAuto resolved)
  bool direct = true;                        // false if the filesystem forced buffered I/O
  uint64_t bytes = 0;                        // moved in the timed passes
  double seconds = 0;
  double gb_s = 0;                           // 1e9 bytes per second
};

// A file that exists with at least `size` bytes is reused and kept (so fio and iobench can share
// one); otherwise it is written first, untimed, and deleted at the end. Buffered reads drop the
// file's page cache before each pass and buffered writes end each pass with fdatasync, so both
// measure the drive. UserError on bad options or an I/O failure, naming the file and offset.
IoBenchResult measure_io(const IoBenchOptions& opts);

// measure_io, then one summary line and, last, one JSON object on stdout:
// {"mode":"read","engine":"uring","bytes":...,"seconds":...,"gb_s":...,"direct":true,...}. Returns 0.
int run_iobench(const IoBenchOptions& opts);

}  // namespace bcd
