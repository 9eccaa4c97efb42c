-- wrk script that drives a *forward proxy*: every request carries an absolute-form target
-- (RFC 9112 §3.2.2), `GET http://ORIGIN/path HTTP/1.1`, with Host naming the origin server, and
-- is sent to the proxy wrk connects to. At the end it writes its summary as one JSON object, so
-- nothing has to parse wrk's human-readable text.
--
-- Usage:
--   TARGET=http://127.0.0.1:41234/bytes/1024 [WORKLOAD=hit|miss] [CLOSE=1] [JSON=out.json] \
--     wrk -t T -c C -d Ds --latency -s bench/wrk/proxy.lua http://PROXY_HOST:PROXY_PORT
--
-- Environment:
--   TARGET    absolute URL at the origin server (required)
--   WORKLOAD  hit  (default): the same URL every request, so a caching proxy serves hits
--             miss: a unique URL per request (`?n=<thread>-<counter>`, or `&n=` when TARGET
--                   already has a query), so every request is a cache miss
--   CLOSE     1: add `Connection: close` to every request (default: keep-alive)
--   JSON      path of the summary written in done():
--             {"requests":N,"duration_s":F,"requests_per_s":F,"bytes":N,
--              "latency_ms":{"mean":F,"p50":F,"p90":F,"p99":F,"max":F},
--              "errors":{"connect":N,"read":N,"write":N,"timeout":N,"status":N},
--              "connections":C,"threads":T}
--             `status` counts responses with a status of 400 or more (wrk's own rule).
--   APDEX_T_MS  optional APDEX threshold T in ms: the JSON then also holds
--             "apdex":{"t_ms":T,"satisfied":F,"tolerating":F}, the fractions of wrk's latency
--             distribution at or below T and in (T, 4T]. (wrk corrects its histogram for
--             coordinated omission, so it holds more samples than requests: fractions, not
--             counts.)
-- A proxy that answers `Connection: close` (stages 1-3) makes wrk reconnect after each
-- response; that is not counted as an error.

local target = os.getenv("TARGET")
if target == nil or target == "" then
  error("proxy.lua: set TARGET to an absolute URL at the origin, e.g. http://127.0.0.1:8000/bytes/1024")
end
local origin_host = target:match("^http://([^/]+)")
if origin_host == nil then
  error("proxy.lua: TARGET must be an absolute http:// URL, got '" .. target .. "'")
end
if not target:match("^http://[^/]+/") then
  target = target .. "/"
end

local workload = os.getenv("WORKLOAD") or "hit"
if workload == "" then workload = "hit" end
if workload ~= "hit" and workload ~= "miss" then
  error("proxy.lua: WORKLOAD must be 'hit' or 'miss', got '" .. workload .. "'")
end
local close = os.getenv("CLOSE") == "1"
local json_path = os.getenv("JSON")
local apdex_t_ms = tonumber(os.getenv("APDEX_T_MS") or "")

-- Counted in setup() (main thread); each thread learns its own number through thread:set.
local threads = {}
local next_thread_id = 0

function setup(thread)
  thread:set("thread_id", next_thread_id)
  next_thread_id = next_thread_id + 1
  table.insert(threads, thread)
end

-- Per-thread state (each wrk thread runs its own copy of this script).
local counter = 0
local fixed_request = nil
local separator = target:find("?", 1, true) and "&" or "?"

local function request_headers()
  local headers = { ["Host"] = origin_host }
  if close then headers["Connection"] = "close" end
  return headers
end

function init(args)
  -- wrk.headers already holds the proxy's Host; the origin server's Host replaces it.
  if workload == "hit" then
    fixed_request = wrk.format("GET", target, request_headers())
  end
end

function request()
  if fixed_request ~= nil then
    return fixed_request
  end
  counter = counter + 1
  local url = target .. separator .. "n=" .. tostring(thread_id) .. "-" .. tostring(counter)
  return wrk.format("GET", url, request_headers())
end

-- wrk's own -t/-c values are not visible to scripts; read them from our command line
-- (Linux /proc), so the JSON states the load that produced it.
local function wrk_flags()
  local connections, thread_count = nil, nil
  local f = io.open("/proc/self/cmdline", "rb")
  if f == nil then return nil, nil end
  local raw = f:read("*a")
  f:close()
  local args = {}
  for arg in raw:gmatch("([^%z]*)%z") do table.insert(args, arg) end
  local i = 1
  while i <= #args do
    local a = args[i]
    local function value(short, long)
      if a == short or a == long then
        i = i + 1
        return args[i]
      end
      if a:sub(1, #short) == short and #a > #short and a:sub(1, 2) ~= "--" then
        return a:sub(#short + 1)
      end
      if a:sub(1, #long + 1) == long .. "=" then
        return a:sub(#long + 2)
      end
      return nil
    end
    local c = value("-c", "--connections")
    if c ~= nil then connections = c else
      local t = value("-t", "--threads")
      if t ~= nil then thread_count = t end
    end
    i = i + 1
  end
  -- wrk accepts suffixes such as 1k; only plain numbers are read here.
  return tonumber(connections), tonumber(thread_count)
end

local function number(x)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then return "null" end
  if x == math.floor(x) and math.abs(x) < 1e15 then return string.format("%d", x) end
  return string.format("%.6f", x)
end

-- Fractions of the latency distribution within T and within 4T (µs in wrk's histogram).
function apdex_json(latency)
  if apdex_t_ms == nil or apdex_t_ms <= 0 then return "" end
  local t_us = apdex_t_ms * 1000
  local total, satisfied, tolerating = 0, 0, 0
  for i = 1, #latency do
    local value, count = latency(i)
    total = total + count
    if value <= t_us then
      satisfied = satisfied + count
    elseif value <= 4 * t_us then
      tolerating = tolerating + count
    end
  end
  if total == 0 then
    return string.format(',"apdex":{"t_ms":%s,"satisfied":null,"tolerating":null}', number(apdex_t_ms))
  end
  return string.format(',"apdex":{"t_ms":%s,"satisfied":%s,"tolerating":%s}', number(apdex_t_ms),
                       number(satisfied / total), number(tolerating / total))
end

function done(summary, latency, requests)
  if json_path == nil or json_path == "" then return end
  local duration_s = summary.duration / 1e6
  local rate = 0
  if duration_s > 0 then rate = summary.requests / duration_s end
  local connections, thread_count = wrk_flags()
  if thread_count == nil then thread_count = #threads end
  local e = summary.errors
  local ms = function(us) return number(us / 1000) end
  local p = function(q)
    if summary.requests == 0 then return "null" end
    return ms(latency:percentile(q))
  end
  local mean = summary.requests > 0 and ms(latency.mean) or "null"
  local max = summary.requests > 0 and ms(latency.max) or "null"
  local out = string.format(
    '{"requests":%s,"duration_s":%s,"requests_per_s":%s,"bytes":%s,' ..
    '"latency_ms":{"mean":%s,"p50":%s,"p90":%s,"p99":%s,"max":%s},' ..
    '"errors":{"connect":%s,"read":%s,"write":%s,"timeout":%s,"status":%s},' ..
    '"connections":%s,"threads":%s%s}\n',
    number(summary.requests), number(duration_s), number(rate), number(summary.bytes),
    mean, p(50), p(90), p(99), max,
    number(e.connect), number(e.read), number(e.write), number(e.timeout), number(e.status),
    number(connections), number(thread_count), apdex_json(latency))
  local f, err = io.open(json_path, "w")
  if f == nil then
    io.stderr:write("proxy.lua: cannot write JSON to " .. json_path .. ": " .. tostring(err) .. "\n")
    os.exit(1)
  end
  f:write(out)
  f:close()
end
