-- revisit_wheel (library): the layout of a shard's revisit schedule, for the scripts that write,
-- move and count it (docs/revisits.md, "How the schedule is stored").
-- Keys (W: prefix .. 'wheel'; a page's record lives in one part of one bucket):
--   <prefix>wheel       sorted set: part ('<level>:<index>:<part>') -> its bucket's end (Unix ms)
--   <prefix>meta        hash: 'n' -> pages scheduled; '<level>:<index>' -> the bucket's part being
--                       written; 'c:<part>' -> the records of a part
--   <prefix>b:<part>    string: the part's records, end to end (WHEEL_RECORD)
--   <prefix>templates   hash: template id -> '<host>\0<score>\0<head>\0<middle>\0<tail>': a request's
--                       queued form less its URL's path and its revisit state
-- A page due at t (ms) goes to the bucket of level L = max(0, floor(log2(delay / 64))), with
-- delay the ms from scheduling to t, index ceil(t / 2^L): the bucket ends at index x 2^L, at most
-- 2^L <= delay / 64 after t, so a page is never moved early and late by at most 1/64 of its
-- interval. A level holds at most 128 buckets ahead of now, so the buckets stay a few thousand
-- whatever the pages scheduled.
-- A record: fingerprint (first 8 bytes), template id, interval (s, float32), first seen,
-- changed at, changes (Unix s; 0: never), content hash (first 8 bytes), Last-Modified (Unix s;
-- 0: none), ETag (length byte, bytes), the URL after its host as JSON text (2-byte length, bytes).
-- Defines: WHEEL_RECORD (the struct format), WHEEL_PART_BYTES (the most bytes of records a part
-- holds: with its string's header, 8 KB, an allocation size of jemalloc's), wheel_level(delay_ms) -> L.
local WHEEL_RECORD = '<c8I4fI4I4I4c8I4Bc0Hc0'
local WHEEL_PART_BYTES = 8176
local function wheel_level(delay)
  if delay < 128 then return 0 end
  return math.floor(math.log(delay / 64) / math.log(2))
end
