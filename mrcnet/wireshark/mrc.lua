-- mrc.lua: a Wireshark dissector for MRC 1.0 (Multipath Reliable Connection) over UDP 4791.
--
-- Shipped with mrcnet (mrcnet/wireshark/mrc.lua). Load it for one run with
--     tshark -X lua_script:$(python -m mrcnet.wireshark path) -r capture.pcap
-- or install it for good with `python -m mrcnet.wireshark install`.
--
-- Layouts: the public readings of the OCP MRC 1.0 packet tables, as restated in mrcnet's
-- protocol notes (section 8). All fields are big-endian; offsets below are from the start
-- of each header. Every field is named mrc.<header>.<key> (mrc.bth.psn, mrc.seth.cack_psn,
-- ...), plus mrc.immdt, mrc.payload_len, mrc.icrc, mrc.ev, mrc.trimmed and
-- mrc.trimmed_lasthop; values are the raw integers on the wire (units and offsets are not
-- applied).
--
-- Port choice: MRC shares UDP 4791 with RoCEv2, and Wireshark hands that port to its
-- InfiniBand (RoCEv2) dissector. This script takes the port over, and gives every frame
-- whose BTH opcode is not one of MRC's back to the RoCEv2 dissector it displaced, so plain
-- RoCEv2 traffic still decodes as before. A port registration wins on every frame, where
-- a UDP heuristic runs only after every port lookup failed (unless the user turns on
-- udp.try_heuristic_first). The heuristic is registered as well, for one case: an EV's low
-- 16 bits ride in the UDP source port, and when that port is below 4791 and belongs to
-- another protocol (53, 123, ...), Wireshark tries it first. Setting
-- udp.try_heuristic_first:TRUE makes such frames MRC too.
--
-- Outer IPv6 with a uSID destination, the inner IPv6 and MRC's one-segment SRH are decoded
-- by Wireshark itself down to UDP; this script starts at the BTH.

local MRC_PORT = 4791

local mrc = Proto("mrc", "Multipath Reliable Connection (MRC 1.0)")

local OPCODES = {
    [0xC6] = "RDMA_WRITE_FIRST", [0xC7] = "RDMA_WRITE_MIDDLE", [0xC8] = "RDMA_WRITE_LAST",
    [0xC9] = "RDMA_WRITE_LAST_IMM", [0xCA] = "RDMA_WRITE_ONLY",
    [0xCB] = "RDMA_WRITE_ONLY_IMM", [0xD1] = "ACK", [0xD8] = "ENDPOINT_REQUEST",
    [0xD9] = "ENDPOINT_RESPONSE", [0xDC] = "SACK", [0xDD] = "NACK",
    [0xDE] = "RELIABILITY_PROBE",
}
local DATA = { [0xC6] = true, [0xC7] = true, [0xC8] = true, [0xC9] = true, [0xCA] = true,
               [0xCB] = true }
local WITH_IMM = { [0xC9] = true, [0xCB] = true }
local NACK_REASONS = {
    [0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x06] = "NO_BITMAP",
    [0x07] = "NO_PKT_BUFFER", [0x0A] = "NO_RESOURCE", [0x0B] = "PSN_OOR_WINDOW",
    [0x19] = "UNEXP_EVENT",
}
local SACK_M = { [0] = "NONE", [1] = "SKIP_ONCE (ECN echo)", [2] = "ALWAYS_SKIP" }
local ENDPOINT_OPS = { [0] = "PORT_STATUS_UPDATE", [1] = "EV_PROBE" }
local FORMAT_TYPES = { [1] = "timestamp" }
local ENDPOINT_QPN = 0x2

local H, D = base.HEX, base.DEC
local u8, u16, u24, u32, u64 = ProtoField.uint8, ProtoField.uint16, ProtoField.uint24,
    ProtoField.uint32, ProtoField.uint64
local i16 = ProtoField.int16

-- name -> ProtoField; the key is the abbreviation without "mrc."
local F = {
    ["bth.opcode"] = u8("mrc.bth.opcode", "Opcode", H, OPCODES),
    ["bth.se"] = u8("mrc.bth.se", "Solicited event (SE)", D, nil, 0x80),
    ["bth.m"] = u8("mrc.bth.m", "Migration (M)", D, nil, 0x40),
    ["bth.pad"] = u8("mrc.bth.pad", "Pad count", D, nil, 0x30),
    ["bth.tver"] = u8("mrc.bth.tver", "Transport header version", D, nil, 0x0F),
    ["bth.pkey"] = u16("mrc.bth.pkey", "Partition key", H),
    ["bth.reserved"] = u8("mrc.bth.reserved", "Reserved", H),
    ["bth.dqpn"] = u24("mrc.bth.dqpn", "Destination QP", H),
    ["bth.a"] = u8("mrc.bth.a", "Ack request (A)", D, nil, 0x80),
    ["bth.r"] = u8("mrc.bth.r", "R", D, nil, 0x40),
    ["bth.rtx"] = u8("mrc.bth.rtx", "Retransmission (RTX)", D, nil, 0x20),
    ["bth.ts"] = u8("mrc.bth.ts", "Timestamp header follows (TS)", D, nil, 0x10),
    ["bth.psn"] = u24("mrc.bth.psn", "PSN", D),

    ["meth.rqmsn"] = u16("mrc.meth.rqmsn", "Request message sequence number (RQMSN)", D),
    ["meth.msn"] = u16("mrc.meth.msn", "Message sequence number (MSN)", D),

    ["tseth.timestamp"] = u16("mrc.tseth.timestamp", "Send timestamp", D),
    ["tseth.tsr"] = u16("mrc.tseth.tsr", "Timestamp resolution (TSR)", D, nil, 0x8000),
    ["tseth.ftype"] = u16("mrc.tseth.ftype", "Format type", D, FORMAT_TYPES, 0x000F),

    ["reth.va"] = u64("mrc.reth.va", "Virtual address", H),
    ["reth.rkey"] = u32("mrc.reth.rkey", "Remote key", H),
    ["reth.dma_len"] = u32("mrc.reth.dma_len", "DMA length", D),

    ["immdt"] = u32("mrc.immdt", "Immediate data", H),
    ["payload_len"] = u32("mrc.payload_len", "Payload length", D),

    ["aeth.syndrome"] = u8("mrc.aeth.syndrome", "Syndrome", H),
    ["aeth.msn"] = u24("mrc.aeth.msn", "Message sequence number (MSN)", D),

    ["seth.m"] = u8("mrc.seth.m", "M (EV skip mode)", D, SACK_M, 0x60),
    ["seth.pr"] = u8("mrc.seth.pr", "Probe response (PR)", D, nil, 0x02),
    ["seth.ack_psn_offset"] = i16("mrc.seth.ack_psn_offset", "ACK PSN offset", D),
    ["seth.entropy"] = u32("mrc.seth.entropy", "Entropy (EV acknowledged)", H),
    ["seth.spdcid"] = u16("mrc.seth.spdcid", "Source PDC id", D),
    ["seth.dpdcid"] = u16("mrc.seth.dpdcid", "Destination PDC id", D),
    ["seth.cack_psn"] = u24("mrc.seth.cack_psn", "Cumulative ACK PSN (last in order)", D),
    ["seth.cc_type"] = u8("mrc.seth.cc_type", "CC type", D, nil, 0xF0),
    ["seth.cc_flags"] = u8("mrc.seth.cc_flags", "CC flags", H, nil, 0x0F),
    ["seth.mpr"] = u8("mrc.seth.mpr", "Max PSN range (x128 PSNs)", D),
    ["seth.sack_offset"] = i16("mrc.seth.sack_offset", "SACK offset", D),
    ["seth.sack_bitmap"] = u64("mrc.seth.sack_bitmap", "SACK bitmap", H),
    ["seth.ack_psn"] = u24("mrc.seth.ack_psn", "Acknowledged PSN (CACK + ACK offset)", D),
    ["seth.sack_base"] = u24("mrc.seth.sack_base", "Bitmap bit 0 PSN (CACK + SACK offset)", D),

    ["cc_state.timestamp"] = u16("mrc.cc_state.timestamp", "Echoed timestamp", D),
    ["cc_state.ooo_count"] = u16("mrc.cc_state.ooo_count", "Out-of-order count", D, nil,
                                 0x7FFF),
    ["cc_state.restore_cwnd"] = u8("mrc.cc_state.restore_cwnd", "Restore cwnd", D, nil, 0x80),
    ["cc_state.rcv_cwnd_pen"] = u8("mrc.cc_state.rcv_cwnd_pen", "Receiver window penalty", D,
                                   nil, 0x7F),
    ["cc_state.rcvd_bytes"] = u24("mrc.cc_state.rcvd_bytes", "Received bytes (x256)", D),

    ["neth.reason"] = u8("mrc.neth.reason", "NACK reason", H, NACK_REASONS),
    ["neth.vendor"] = u8("mrc.neth.vendor", "Vendor information", H),
    ["neth.entropy"] = u32("mrc.neth.entropy", "Entropy (EV NACKed)", H),
    ["neth.spdcid"] = u16("mrc.neth.spdcid", "Source PDC id", D),
    ["neth.dpdcid"] = u16("mrc.neth.dpdcid", "Destination PDC id", D),
    ["neth.nack_psn"] = u24("mrc.neth.nack_psn", "NACK PSN", D),
    ["neth.cc_type"] = u8("mrc.neth.cc_type", "CC type", D, nil, 0xF0),
    ["neth.cc_flags"] = u8("mrc.neth.cc_flags", "CC flags", H, nil, 0x0F),
    ["neth.timestamp"] = u16("mrc.neth.timestamp", "Echoed timestamp", D),

    ["peth.vendor"] = u8("mrc.peth.vendor", "Vendor information", H),
    ["peth.probe_id"] = u16("mrc.peth.probe_id", "Probe id", D),
    ["peth.spdcid"] = u16("mrc.peth.spdcid", "Source PDC id", D),
    ["peth.dpdcid"] = u16("mrc.peth.dpdcid", "Destination PDC id", D),
    ["peth.timestamp"] = u16("mrc.peth.timestamp", "Timestamp", D),
    ["peth.tsr"] = u16("mrc.peth.tsr", "Timestamp resolution (TSR)", D, nil, 0x8000),
    ["peth.ftype"] = u16("mrc.peth.ftype", "Format type", D, FORMAT_TYPES, 0x000F),

    ["erth.op"] = u8("mrc.erth.op", "Endpoint operation", D, ENDPOINT_OPS, 0x03),
    ["erth.vendor"] = u8("mrc.erth.vendor", "Vendor information", H),
    ["erth.port_status_mask"] = u32("mrc.erth.port_status_mask", "Port status mask", H),
    -- ERTH @8 is reserved in MRC 1.0; mrcnet carries its endpoint token there (the QP
    -- pair's two mrcds' random halves XORed, docs/SECURITY.md). 0: none sent.
    ["erth.token"] = u32("mrc.erth.token", "Endpoint token (mrcnet; reserved in MRC 1.0)", H),
    ["erth.timestamp"] = u16("mrc.erth.timestamp", "Timestamp", D),
    ["erth.tsr"] = u16("mrc.erth.tsr", "Timestamp resolution (TSR)", D, nil, 0x8000),
    ["erth.ftype"] = u16("mrc.erth.ftype", "Format type", D, FORMAT_TYPES, 0x000F),

    ["eeth.op"] = u8("mrc.eeth.op", "Endpoint operation", D, ENDPOINT_OPS, 0x30),
    ["eeth.timestamp"] = u16("mrc.eeth.timestamp", "Timestamp", D),

    ["icrc"] = u32("mrc.icrc", "ICRC (as stored)", H),
    ["ev"] = u32("mrc.ev", "Entropy value (UDP source port + flow label)", H),
    ["trimmed"] = u8("mrc.trimmed", "Trimmed", D, { [0] = "no", [1] = "yes" }),
    ["trimmed_lasthop"] = u8("mrc.trimmed_lasthop", "Trimmed at the last hop (incast)", D,
                             { [0] = "no", [1] = "yes" }),
    ["extra"] = ProtoField.bytes("mrc.extra", "Bytes after the headers"),
    ["payload"] = ProtoField.bytes("mrc.payload", "Payload"),
}
-- One FT_NONE item per header, so a header is a filter (mrc.seth) and a JSON object.
local HEADER_NAMES = {
    bth = "Base Transport Header (BTH)",
    meth = "Message Extended Transport Header (METH)",
    tseth = "Timestamp Extended Transport Header (TSETH)",
    reth = "RDMA Extended Transport Header (RETH)",
    immdt = "Immediate data (ImmDt)",
    aeth = "ACK Extended Transport Header (AETH)",
    seth = "SACK Extended Transport Header (SETH)",
    cc_state = "Congestion control state (CC_STATE)",
    neth = "NACK Extended Transport Header (NETH)",
    peth = "Reliability probe header (PETH)",
    erth = "Endpoint request header (ERTH)",
    eeth = "Endpoint response header (EETH)",
}
local HDR = {}
for key, label in pairs(HEADER_NAMES) do
    if key ~= "immdt" then HDR[key] = ProtoField.none("mrc." .. key, label) end
end
local list = {}
for _, f in pairs(F) do list[#list + 1] = f end
for _, f in pairs(HDR) do list[#list + 1] = f end
mrc.fields = list

local E = {
    short = ProtoExpert.new("mrc.short", "Frame ends inside an MRC header",
                            expert.group.MALFORMED, expert.severity.ERROR),
    trimmed = ProtoExpert.new("mrc.trimmed.expert", "Trimmed: only the headers arrived",
                              expert.group.SEQUENCE, expert.severity.NOTE),
    no_icrc = ProtoExpert.new("mrc.no_icrc", "No room for the ICRC",
                              expert.group.MALFORMED, expert.severity.ERROR),
    extra = ProtoExpert.new("mrc.extra.expert", "Unexpected bytes after the MRC headers",
                            expert.group.PROTOCOL, expert.severity.WARN),
    tver = ProtoExpert.new("mrc.tver.expert", "Transport header version is not 0",
                           expert.group.PROTOCOL, expert.severity.WARN),
    ftype = ProtoExpert.new("mrc.ftype.expert", "Timestamp format type is not 1",
                            expert.group.PROTOCOL, expert.severity.WARN),
    qpn = ProtoExpert.new("mrc.qpn.expert", "Endpoint operation not on the reserved QP 0x2",
                          expert.group.PROTOCOL, expert.severity.WARN),
    snap = ProtoExpert.new("mrc.snaplen.expert", "Capture cut the frame (snap length)",
                           expert.group.UNDECODED, expert.severity.NOTE),
}
mrc.experts = { E.short, E.trimmed, E.no_icrc, E.extra, E.tver, E.ftype, E.qpn, E.snap }

mrc.prefs.ev_sport_high = Pref.bool(
    "EV high half in the source port", false,
    "Off (default): the EV's low 16 bits ride in the UDP source port and its high 16 bits "
    .. "in the flow label's low 16 bits. On: the other way round.")

-- A trim's place is in the outer header's DSCP: the switch re-marks it TRIMMED, or
-- TRIMMED_LASTHOP at its port to the receiving host. The fabric's operator picks the code
-- points (mrcnet.constants.DSCP_TRIMMED_LASTHOP is the default; an mrc-fabric spec's
-- dscp= key moves it), so it is a preference.
mrc.prefs.dscp_trimmed_lasthop = Pref.uint(
    "DSCP of a last-hop trim", 32,
    "The outer DSCP a switch gives a frame it trimmed at its port to the receiving host "
    .. "(incast, not a path problem). Default 32 (CS4), mrcnet's default.")

local f_udp_len = Field.new("udp.length")
local f_dscp = Field.new("ipv6.tclass.dscp")
local f_flow = Field.new("ipv6.flow")

local function first(field)
    local v = field()
    if v == nil then return nil end
    return v.value
end

local function last(field)
    local all = { field() }
    local v = all[#all]
    if v == nil then return nil end
    return v.value
end

-- Header layouts: { key, offset, length } relative to the header's start.
local LAYOUT = {
    meth = { 4,
             { { "meth.rqmsn", 0, 2 }, { "meth.msn", 2, 2 } } },
    tseth = { 4, { { "tseth.timestamp", 0, 2 }, { "tseth.tsr", 2, 2 }, { "tseth.ftype", 2, 2 } } },
    reth = { 16,
             { { "reth.va", 0, 8 }, { "reth.rkey", 8, 4 }, { "reth.dma_len", 12, 4 } } },
    immdt = { 4, { { "immdt", 0, 4 } } },
    aeth = { 4,
             { { "aeth.syndrome", 0, 1 }, { "aeth.msn", 1, 3 } } },
    seth = { 28,
             { { "seth.m", 1, 1 }, { "seth.pr", 1, 1 }, { "seth.ack_psn_offset", 2, 2 },
               { "seth.entropy", 4, 4 }, { "seth.spdcid", 8, 2 }, { "seth.dpdcid", 10, 2 },
               { "seth.cack_psn", 13, 3 }, { "seth.cc_type", 16, 1 },
               { "seth.cc_flags", 16, 1 }, { "seth.mpr", 17, 1 },
               { "seth.sack_offset", 18, 2 }, { "seth.sack_bitmap", 20, 8 } } },
    cc_state = { 8,
                 { { "cc_state.timestamp", 0, 2 }, { "cc_state.ooo_count", 2, 2 },
                   { "cc_state.restore_cwnd", 4, 1 }, { "cc_state.rcv_cwnd_pen", 4, 1 },
                   { "cc_state.rcvd_bytes", 5, 3 } } },
    neth = { 20,
             { { "neth.reason", 2, 1 }, { "neth.vendor", 3, 1 }, { "neth.entropy", 4, 4 },
               { "neth.spdcid", 8, 2 }, { "neth.dpdcid", 10, 2 }, { "neth.nack_psn", 13, 3 },
               { "neth.cc_type", 16, 1 }, { "neth.cc_flags", 16, 1 },
               { "neth.timestamp", 18, 2 } } },
    peth = { 16,
             { { "peth.vendor", 3, 1 }, { "peth.probe_id", 4, 2 }, { "peth.spdcid", 8, 2 },
               { "peth.dpdcid", 10, 2 }, { "peth.timestamp", 12, 2 }, { "peth.tsr", 14, 2 },
               { "peth.ftype", 14, 2 } } },
    erth = { 16,
             { { "erth.op", 1, 1 }, { "erth.vendor", 3, 1 },
               { "erth.port_status_mask", 4, 4 }, { "erth.token", 8, 4 },
               { "erth.timestamp", 12, 2 },
               { "erth.tsr", 14, 2 }, { "erth.ftype", 14, 2 } } },
    eeth = { 36,
             { { "eeth.op", 1, 1 }, { "eeth.timestamp", 28, 2 } } },
}
local BTH_FIELDS = {
    { "bth.opcode", 0, 1 }, { "bth.se", 1, 1 }, { "bth.m", 1, 1 }, { "bth.pad", 1, 1 },
    { "bth.tver", 1, 1 }, { "bth.pkey", 2, 2 }, { "bth.reserved", 4, 1 },
    { "bth.dqpn", 5, 3 }, { "bth.a", 8, 1 }, { "bth.r", 8, 1 }, { "bth.rtx", 8, 1 },
    { "bth.ts", 8, 1 }, { "bth.psn", 9, 3 },
}

local function add_fields(subtree, tvb, off, fields)
    for _, fd in ipairs(fields) do
        subtree:add(F[fd[1]], tvb(off + fd[2], fd[3]))
    end
end

-- The headers that follow the BTH, in order.
local function headers_for(opcode, ts)
    if DATA[opcode] then
        local hs = { "meth" }
        if ts then hs[#hs + 1] = "tseth" end
        hs[#hs + 1] = "reth"
        if WITH_IMM[opcode] then hs[#hs + 1] = "immdt" end
        return hs
    end
    if opcode == 0xD1 then return { "aeth" } end
    if opcode == 0xDC then return { "seth", "cc_state" } end
    if opcode == 0xDD then return { "neth" } end
    if opcode == 0xDE then return { "peth" } end
    if opcode == 0xD8 then return { "erth" } end
    if opcode == 0xD9 then return { "eeth" } end
    return {}
end

local function to24(x) return x % 0x1000000 end

-- The subtree of one header (an FT_NONE item); ImmDt, one field, sits in the MRC tree.
local function header_item(root, name, tvb, off, n)
    if HDR[name] ~= nil then return root:add(HDR[name], tvb(off, n)) end
    return root
end

local udp_port_table = DissectorTable.get("udp.port")
local displaced = udp_port_table:get_dissector(MRC_PORT)  -- RoCEv2, for non-MRC opcodes

function mrc.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    if len < 1 then return 0 end
    local opcode = tvb(0, 1):uint()
    if not OPCODES[opcode] then
        if displaced ~= nil then return displaced:call(tvb, pinfo, tree) end
        return 0
    end
    pinfo.cols.protocol = "MRC"
    local root = tree:add(mrc, tvb())

    local sport = pinfo.src_port
    local flow = last(f_flow)
    if flow ~= nil then
        local fl16 = flow % 0x10000
        local ev
        if mrc.prefs.ev_sport_high then ev = sport * 0x10000 + fl16
        else ev = fl16 * 0x10000 + sport end
        root:add(F["ev"], ev):set_generated()
    end

    if len < 12 then
        local st = root:add(HDR.bth, tvb(0, len))
        st:append_text(" [cut short]")
        st:add_proto_expert_info(E.short, string.format(
            "Frame ends inside the BTH: %d of 12 bytes", len))
        pinfo.cols.info = "MRC (short BTH)"
        return len
    end
    local bth = root:add(HDR.bth, tvb(0, 12))
    add_fields(bth, tvb, 0, BTH_FIELDS)
    if tvb(1, 1):uint() % 16 ~= 0 then bth:add_proto_expert_info(E.tver) end
    local psn = tvb(9, 3):uint()
    local dqpn = tvb(5, 3):uint()
    local ts = tvb(8, 1):bitfield(3, 1) == 1
    local info = string.format("%s QP=0x%06x PSN=%d", OPCODES[opcode], dqpn, psn)
    if (opcode == 0xD8 or opcode == 0xD9) and dqpn ~= ENDPOINT_QPN then
        bth:add_proto_expert_info(E.qpn)
    end

    local off = 12
    local dma_len = 0
    for _, name in ipairs(headers_for(opcode, ts)) do
        local lay = LAYOUT[name]
        local hlen = lay[1]
        if len - off < hlen then
            local st = header_item(root, name, tvb, off, len - off)
            st:append_text(" [cut short]")
            st:add_proto_expert_info(E.short, string.format(
                "Frame ends inside the %s: %d of %d bytes", name:upper(), len - off, hlen))
            root:add(F["trimmed"], 0):set_generated()
            pinfo.cols.info = info .. " [malformed]"
            return len
        end
        local st = header_item(root, name, tvb, off, hlen)
        add_fields(st, tvb, off, lay[2])
        if name == "reth" then dma_len = tvb(off + 12, 4):uint() end
        if name == "tseth" and tvb(off + 2, 2):uint() % 16 ~= 1 then
            st:add_proto_expert_info(E.ftype)
        end
        if name == "peth" or name == "erth" then
            if tvb(off + 14, 2):uint() % 16 ~= 1 then st:add_proto_expert_info(E.ftype) end
        end
        if name == "seth" then
            local cack = tvb(off + 13, 3):uint()
            st:add(F["seth.ack_psn"], to24(cack + tvb(off + 2, 2):int())):set_generated()
            st:add(F["seth.sack_base"], to24(cack + tvb(off + 18, 2):int())):set_generated()
            info = info .. string.format(" CACK=%d", cack)
            if tvb(off + 1, 1):bitfield(6, 1) == 1 then info = info .. " PR" end
        elseif name == "neth" then
            local r = tvb(off + 2, 1):uint()
            info = info .. string.format(" %s NACK_PSN=%d",
                NACK_REASONS[r] or string.format("reason 0x%02x", r), tvb(off + 13, 3):uint())
        elseif name == "erth" then
            info = info .. " " .. (ENDPOINT_OPS[tvb(off + 1, 1):uint() % 4] or "op ?")
            local token = tvb(off + 8, 4):uint()
            if token ~= 0 then info = info .. string.format(" token=0x%08x", token) end
        elseif name == "eeth" then
            info = info .. " " .. (ENDPOINT_OPS[math.floor(tvb(off + 1, 1):uint() / 16) % 4]
                                   or "op ?")
        end
        off = off + hlen
    end

    -- What follows the headers: payload (data packets) and the 4-byte ICRC.
    local avail = len - off
    local claimed = nil
    local udp_len = last(f_udp_len)
    if udp_len ~= nil and udp_len >= 8 then claimed = udp_len - 8 end
    local snapped = pinfo.caplen < pinfo.len
    local trimmed = false
    if DATA[opcode] then
        local payload
        if snapped then
            payload = avail
            root:add_proto_expert_info(E.snap)
        elseif (claimed ~= nil and len < claimed) or (avail < 4 and dma_len > 0) then
            -- The frame ends before its IP/UDP lengths say (the usual trim), or a switch
            -- fixed the lengths up and left no room for the ICRC while RETH promises data.
            trimmed = true
            payload = avail
        elseif avail < 4 then
            payload = avail
            root:add_proto_expert_info(E.no_icrc)
        else
            payload = avail - 4
        end
        root:add(F["payload_len"], payload):set_generated()
        if payload > 0 then
            root:add(F["payload"], tvb(off, payload))
        end
        off = off + payload
        avail = len - off
    elseif avail > 4 then
        root:add(F["extra"], tvb(off, avail - 4)):add_proto_expert_info(E.extra)
        off = len - 4
        avail = 4
    end
    local ti = root:add(F["trimmed"], trimmed and 1 or 0)
    ti:set_generated()
    if trimmed then
        ti:add_proto_expert_info(E.trimmed)
        -- The outer header's DSCP (the first IPv6 header: switches re-mark the outer).
        local lasthop = first(f_dscp) == mrc.prefs.dscp_trimmed_lasthop
        root:add(F["trimmed_lasthop"], lasthop and 1 or 0):set_generated()
        info = info .. (lasthop and " [TRIMMED at the last hop]" or " [TRIMMED]")
    elseif avail >= 4 then
        root:add(F["icrc"], tvb(off, 4))
    elseif not snapped and not DATA[opcode] then
        root:add_proto_expert_info(E.no_icrc)
    end
    pinfo.cols.info = info
    root:append_text(", " .. info)
    return len
end

local function heuristic(tvb, pinfo, tree)
    if pinfo.dst_port ~= MRC_PORT or tvb:len() < 12 then return false end
    if not OPCODES[tvb(0, 1):uint()] then return false end
    mrc.dissector(tvb, pinfo, tree)
    return true
end

udp_port_table:add(MRC_PORT, mrc)
mrc:register_heuristic("udp", heuristic)
