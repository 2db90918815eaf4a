-- Shale's Lua prelude: Redis's script sandbox on a stock Lua 5.1. Run once per VM as chunk
-- "=shale", after the Rust side has put the libraries in the globals; `prim` is the table of
-- primitives both sides share (Rust sets `prim.call` and `prim.acl_check` once, which answer
-- for the script running if any, and `prim.register` while a FUNCTION LOAD runs). Frames of this chunk are skipped when an error is located.
local prim, library_api = ...
local G = _G
local dbg = debug
debug = nil
rawset(G, 'dofile', nil)
rawset(G, 'loadfile', nil)
rawset(G, 'print', nil)
-- Not in Redis 7.0's sandbox either: they would reach the real globals behind the proxies.
rawset(G, 'getfenv', nil)
rawset(G, 'setfenv', nil)
rawset(G, 'newproxy', nil)

-- Redis's Lua parses every chunk as text: precompiled (binary) chunks, which can break the
-- VM's memory safety, never load.
local text_loadstring, concat = loadstring, table.concat
local function loadstring_text(s, chunkname)
  if type(s) == 'string' and s:byte(1) == 27 then
    return nil, "binary chunks are not loaded: unexpected symbol near '<\\27>'"
  end
  return text_loadstring(s, chunkname)
end
rawset(G, 'loadstring', loadstring_text)
rawset(G, 'load', function(reader, chunkname)
  local parts = {}
  while true do
    local piece = reader()
    if piece == nil or piece == '' then
      break
    end
    if type(piece) ~= 'string' then
      return nil, 'reader function must return a string'
    end
    parts[#parts + 1] = piece
  end
  return loadstring_text(concat(parts), chunkname or '=(load)')
end)

local error, type, tostring, rawget, rawset = error, type, tostring, rawget, rawset
local setmetatable, getmetatable, pcall, xpcall, ipairs = setmetatable, getmetatable, pcall, xpcall, ipairs

-- Redis's `__redis__err__handler`: an error becomes a table {err=, source=, line=} naming the
-- line of the script that raised it.
local function internal(i)
  return i and (i.what == 'C' or i.what == 'tail' or i.source == '=shale')
end
local function handler(err)
  local level = 2
  local i = dbg.getinfo(level, 'nSl')
  while internal(i) and level < 12 do
    level = level + 1
    i = dbg.getinfo(level, 'nSl')
  end
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end
  return err
end
rawset(G, '__redis__err__handler', handler)

-- Runs a script body (or a function, with its KEYS and ARGV) under the handler. The function
-- and its arguments wait in upvalues of one body rather than in a closure made per run (a VM
-- runs one script at a time: nothing a script calls runs another).
local run_f, run_keys, run_args
local function body()
  return run_f(run_keys, run_args)
end
function prim.run(f, keys, args, eval)
  if eval then
    -- An EVAL script also finds its keys and arguments in the globals KEYS and ARGV.
    rawset(G, 'KEYS', keys)
    rawset(G, 'ARGV', args)
  end
  run_f, run_keys, run_args = f, keys, args
  local ok, r = xpcall(body, handler)
  run_f, run_keys, run_args = nil, nil, nil
  return ok, r
end

-- redis.call and redis.pcall are C functions (see `call_api`) that hand their arguments to
-- prim.call themselves; prim.call answers (true, reply) or (false, error table).
function prim.acl_check_api(...)
  local ok, r = prim.acl_check(select('#', ...), {...})
  if not ok then
    error(r)
  end
  return r
end
function prim.register_api(...)
  local f = prim.register
  if not f then
    error({err = 'ERR redis.register_function can only be called on FUNCTION LOAD command'})
  end
  local ok, r = f(...)
  if not ok then
    error({err = r})
  end
end

-- A library's code runs under the stock pcall: its error value comes back as it was raised.
function prim.protected(f)
  return pcall(f)
end

-- Redis's pcall: an error table caught is returned as its `err` text.
local function pcall_result(ok, ...)
  if ok then
    return ok, ...
  end
  local e = ...
  if type(e) == 'table' then
    local text = rawget(e, 'err')
    if type(text) == 'string' or type(text) == 'number' then
      e = text
    end
  end
  return false, e
end
rawset(G, 'pcall', function(...)
  return pcall_result(pcall(...))
end)

-- Read-only tables: proxies whose writes fail as Redis's read-only tables do.
local readonly = setmetatable({}, {__mode = 'k'})
-- The table behind each read-only proxy, so `pairs` and `next` see its contents.
local backing = setmetatable({}, {__mode = 'k'})
local function refuse()
  error('Attempt to modify a readonly table', 2)
end
local function view(meta)
  local shown = setmetatable({}, {__index = meta, __newindex = refuse, __metatable = false})
  readonly[shown] = true
  return shown
end
local function freeze(real)
  local meta = {__index = real, __newindex = refuse}
  meta.__metatable = view(meta)
  local proxy = setmetatable({}, meta)
  readonly[proxy] = true
  backing[proxy] = real
  return proxy
end
rawset(G, 'setmetatable', function(t, m)
  if readonly[t] then
    error('Attempt to modify a readonly table', 0)
  end
  return setmetatable(t, m)
end)
local raw_next = next
local function next_of(t, k)
  return raw_next(backing[t] or t, k)
end
rawset(G, 'next', next_of)
rawset(G, 'pairs', function(t)
  if type(t) ~= 'table' then
    error("bad argument #1 to 'pairs' (table expected, got " .. (t == nil and 'no value' or type(t)) .. ')', 2)
  end
  return next_of, t, nil
end)
rawset(G, 'rawset', function(t, k, v)
  if readonly[t] then
    error('Attempt to modify a readonly table', 0)
  end
  return rawset(t, k, v)
end)

-- Where the script stands, as luaL_where names it ("user_script:3: "), skipping our frames.
local function where()
  local level = 3
  local i = dbg.getinfo(level, 'Sl')
  while internal(i) and level < 12 do
    level = level + 1
    i = dbg.getinfo(level, 'Sl')
  end
  if i and i.currentline > 0 then
    return i.short_src .. ':' .. i.currentline .. ': '
  end
  return ''
end

-- Reading a global that does not exist is an error, and so is writing any.
local function missing(_, name)
  error(where() .. "Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 0)
end

-- Seals the globals once the Rust side has added its libraries (named in `libraries`).
function prim.seal(libraries)
  for _, name in ipairs(libraries) do
    rawset(G, name, freeze(rawget(G, name)))
  end
  local smeta = dbg.getmetatable('')
  smeta.__index = rawget(G, 'string')
  smeta.__metatable = false
  local gmeta = {__index = missing, __newindex = refuse}
  gmeta.__metatable = view(gmeta)
  setmetatable(G, gmeta)
  readonly[G] = true

  -- EVAL scripts see the globals through an empty proxy, so assigning to an existing global
  -- (`redis = …`, `_G = …`) fails too; `_G` is the proxy.
  local env = {}
  local emeta = {__index = G, __newindex = refuse}
  emeta.__metatable = view(emeta)
  setmetatable(env, emeta)
  readonly[env] = true
  rawset(G, '_G', env)
  prim.eval_globals = env
  backing[env] = G

  -- Function libraries share one globals table: while FUNCTION LOAD runs a library, it sees
  -- only `redis` with register_function and log; when its functions run, the globals.
  -- As Redis's, the load-time `redis` table raises on a missing field too.
  local load_api = freeze(setmetatable(library_api, {__index = missing}))
  local load_globals = setmetatable({redis = load_api}, {__index = missing})
  local current = load_globals
  local fmeta = {__index = function(_, k) return current[k] end, __newindex = refuse}
  fmeta.__metatable = view(fmeta)
  local fenv = setmetatable({}, fmeta)
  readonly[fenv] = true
  prim.function_globals = fenv
  function prim.loading(on)
    current = on and load_globals or G
  end
  prim.loading(false)
end
