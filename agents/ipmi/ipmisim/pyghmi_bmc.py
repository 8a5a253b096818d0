#!/usr/bin/python3
"""A BMC on Debian's python3-pyghmi, for fenced's tests.

pyghmi (the library under OpenStack VirtualBMC) carries the IPMI server
side: RMCP+ framing, AES-CBC-128, the integrity trailer, the event loop.
This script subclasses its server session (pyghmi.ipmi.private.
serversession) where pyghmi is not a full BMC, and where a test wants a
BMC to misbehave. Each override below says which.

What pyghmi itself does, and this script changes by default:
  - it answers every Open Session with cipher suite 3's algorithms, whatever
    was asked (a downgrade: --downgrade keeps that for suite 17); here the
    algorithms asked for are answered when the BMC offers that suite
    (17: RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128; 3: RAKP-HMAC-SHA1,
    HMAC-SHA1-96, AES-CBC-128), and refused with RMCP+ status 0x11
    otherwise;
  - its Get Device ID answers 14 bytes (manufacturer and product IDs of 4
    bytes each, where the specification has 3 and 2); here 15, the layout
    of the specification (--malformed-device-id keeps pyghmi's own);
  - it stays silent on an unknown user or a bad RAKP 3, and keeps no count
    of sessions; here those get the RMCP+ status a BMC answers, and
    sessions are counted, closed by Close Session (by their ID too) and
    expired after --session-timeout seconds without a request.

The test drives the BMC over stdin, one command a line, each answered by
one line on stdout:
  power on | power off      set the chassis state   -> ok
  reply honest | reply no-integrity | reply bad-integrity
                            change the reply quirk  -> ok
  status                    -> one JSON object (power, sessions, counters)
End of stdin ends the BMC. The first line on stdout is "ready PORT".
The password comes from the environment (PYGHMI_BMC_PASSWORD), so that it
is not in the process's arguments.
"""

import argparse
import hashlib
import hmac
import json
import os
import struct
import sys
import threading
import time
import traceback

try:
    import pyghmi.ipmi.bmc as pyghmi_bmc
    import pyghmi.ipmi.private.constants as constants
    import pyghmi.ipmi.private.serversession as serversession
    import pyghmi.ipmi.private.session as ipmisession
except ImportError as e:
    sys.stderr.write("pyghmi_bmc: cannot import pyghmi (install the Debian "
                     "package python3-pyghmi): %s\n" % e)
    sys.exit(3)

# Algorithm numbers (IPMI v2.0 tables 13-17, 13-18, 13-19) of the suites
# this BMC can run: (authentication, integrity, confidentiality).
SUITES = {3: (1, 1, 1), 17: (3, 4, 1)}
# RAKP authentication algorithm -> its hash; 0 is RAKP-none.
AUTH_HASH = {1: hashlib.sha1, 3: hashlib.sha256}
# RAKP 4's integrity check value length, per authentication algorithm.
ICV_LEN = {1: 12, 3: 16}
# Integrity algorithm -> (hash, length of the AuthCode in the trailer).
INTEGRITY = {1: (hashlib.sha1, 12), 4: (hashlib.sha256, 16)}

# RMCP+ status codes (table 13-15).
INSUFFICIENT_RESOURCES = 0x01
INVALID_SESSION_ID = 0x02
UNAUTHORIZED_NAME = 0x0D
INVALID_INTEGRITY_CHECK = 0x0F
NO_MATCHING_SUITE = 0x11
ILLEGAL_PARAMETER = 0x12

OPEN_RESPONSE = constants.payload_types['rmcpplusopenresponse']
RAKP2 = constants.payload_types['rakp2']
RAKP4 = constants.payload_types['rakp4']
IPMI = constants.payload_types['ipmi']


def log(msg, *args):
    sys.stderr.write("pyghmi_bmc: " + (msg % args) + "\n")
    sys.stderr.flush()


def u32(b):
    return struct.unpack('<I', bytes(b))[0]


class Session(serversession.ServerSession):
    """One client's RMCP+ session, with the BMC's quirks.

    pyghmi routes every packet from a client address to the session object
    registered for it, so a session is one client address. Overrides:
    create_open_session_response, _got_rakp1, _got_rakp3 and _send_rakp4
    (the handshake, for suite 17 and the hostile handshakes),
    handle_client_request (Close Session, Set Session Privilege Level),
    send_payload and _xmit_packet (the hostile replies).
    """

    # -- Open Session ------------------------------------------------------
    def create_open_session_response(self, request):
        bmc = self.bmc
        # A client may open again from the same address: start afresh
        # (pyghmi would answer the new request inside the old session's
        # integrity and encryption).
        self.integrityalgo = 0
        self.confalgo = 0
        self.sessionid = 0
        self.sequencenumber = 0
        self.k1 = None
        self.established = False
        self.refused = False
        self.corrupt_next = False
        self.last_active = time.monotonic()
        self.clientpriv = 2  # a session starts at User (22.18)
        tag = request[0]
        self.clientsessionid = bytearray(request[4:8])
        if len(request) < 32:
            return self._refuse_open(tag, ILLEGAL_PARAMETER, "short request")
        asked = (request[12] & 0x3f, request[20] & 0x3f, request[28] & 0x3f)
        chosen = bmc.choose_algorithms(asked)
        if chosen is None:
            return self._refuse_open(
                tag, NO_MATCHING_SUITE,
                "no offered suite has algorithms %s" % (asked,))
        if bmc.full(self.sockaddr):
            # --session-limit: every slot is taken.
            return self._refuse_open(tag, INSUFFICIENT_RESOURCES,
                                     "session limit %d reached" %
                                     bmc.session_limit)
        self.suite, (self.authalg, self.integalg, self.conf) = chosen
        self.managedsessionid = bytearray(os.urandom(4))
        while u32(self.managedsessionid) == 0:
            self.managedsessionid = bytearray(os.urandom(4))
        self.bmcsid = u32(self.managedsessionid)
        self.privlevel = 4
        bmc.track(self)
        log("session 0x%08x from %s opened, suite %d", self.bmcsid,
            self.sockaddr, self.suite)
        if (self.authalg, self.integalg, self.conf) != asked:
            bmc.count('downgraded')
            log("open session: asked for algorithms %s, answering %s",
                asked, (self.authalg, self.integalg, self.conf))
        return (bytearray([tag, 0, self.privlevel, 0]) + self.clientsessionid
                + self.managedsessionid
                + bytearray([0, 0, 0, 8, self.authalg, 0, 0, 0,
                             1, 0, 0, 8, self.integalg, 0, 0, 0,
                             2, 0, 0, 8, self.conf, 0, 0, 0]))

    def _refuse_open(self, tag, status, why):
        self.refused = True
        self.bmc.forget(self, handlers=False)
        self.bmc.count('refused')
        self.bmc.last_refusal = "status 0x%02x: %s" % (status, why)
        log("open session refused (status 0x%02x): %s", status, why)
        # The short form of table 13-10 for an error.
        return bytearray([tag, status, 0, 0]) + self.clientsessionid

    def _got_rmcp_openrequest(self, data):
        super()._got_rmcp_openrequest(data)
        if self.refused:
            self.bmc.drop_handler(self)

    # -- RAKP 1 -> RAKP 2 ----------------------------------------------------
    def _got_rakp1(self, data):
        if self.refused or len(data) < 28:
            return
        self.last_active = time.monotonic()
        tag = data[0]
        if u32(data[4:8]) != self.bmcsid:
            return self._short_reply(RAKP2, tag, INVALID_SESSION_ID)
        self.Rm = bytearray(data[8:24])
        self.rolem = data[24]
        self.maxpriv = self.rolem & 0b1111
        ulen = data[27]
        self.username = bytes(data[28:28 + ulen])
        password = self.authdata.get(self.username.decode('utf-8', 'replace'))
        if ulen == 0 or password is None:
            # pyghmi stays silent; a BMC answers "unauthorized name".
            return self._short_reply(RAKP2, tag, UNAUTHORIZED_NAME)
        self.kuid = password.encode('utf-8')
        self.kg = self.bmc.kg or self.kuid
        self.uuiddata = self.uuid.bytes
        self.Rc = bytearray(os.urandom(16))
        rakphash = AUTH_HASH.get(self.authalg)
        if rakphash is None or self.bmc.skip_password:
            # --rakp-none, --skip-password: no key exchange authentication
            # code, so the BMC never shows that it knows the password.
            authcode = b''
            self.bmc.count('skipped_password')
        else:
            hmacdata = (self.clientsessionid + self.managedsessionid
                        + self.Rm + self.Rc + self.uuiddata
                        + bytearray([self.rolem, ulen]) + self.username)
            authcode = hmac.new(self.kuid, bytes(hmacdata), rakphash).digest()
        message = (bytearray([tag, 0, 0, 0]) + self.clientsessionid + self.Rc
                   + self.uuiddata + authcode)
        self.send_payload(message, RAKP2, retry=False)

    # -- RAKP 3 -> RAKP 4, session established ----------------------------------
    def _got_rakp3(self, data):
        if self.refused or not hasattr(self, 'Rc') or len(data) < 8:
            return
        self.last_active = time.monotonic()
        tag = data[0]
        if data[1] != 0:
            # The console refused our RAKP 2 (wrong password, or a
            # console that refuses a hostile handshake): no session.
            log("console refused RAKP 2 (status 0x%02x)", data[1])
            self.bmc.forget(self)
            return
        if u32(data[4:8]) != self.bmcsid:
            return self._short_reply(RAKP4, tag, INVALID_SESSION_ID)
        # With RAKP-none the keys still come from a hash: SHA1, so that the
        # session can go on if a console accepts it.
        rakphash = AUTH_HASH.get(self.authalg, hashlib.sha1)
        namepart = struct.pack('2B', self.rolem, len(self.username)) + \
            self.username
        if not (self.bmc.skip_password or self.authalg == 0):
            expected = hmac.new(
                self.kuid, bytes(self.Rc + self.clientsessionid) + namepart,
                rakphash).digest()
            if bytes(data[8:]) != expected:
                # pyghmi drops a bad RAKP 3; a BMC answers it.
                log("RAKP 3: wrong key exchange authentication code")
                self._short_reply(RAKP4, tag, INVALID_INTEGRITY_CHECK)
                self.bmc.forget(self)
                return
        self.sik = hmac.new(self.kg, bytes(self.Rm + self.Rc) + namepart,
                            rakphash).digest()
        self.k1 = hmac.new(self.sik, b'\x01' * 20, rakphash).digest()
        self.k2 = hmac.new(self.sik, b'\x02' * 20, rakphash).digest()
        self.aeskey = self.k2[0:16]
        self._send_rakp4(tag, 0)

    def _send_rakp4(self, tagvalue, statuscode):
        payload = bytearray([tagvalue, statuscode, 0, 0]) + \
            self.clientsessionid
        if self.authalg in ICV_LEN:
            icvdata = bytes(self.Rm + self.managedsessionid + self.uuiddata)
            payload += hmac.new(self.sik, icvdata, AUTH_HASH[self.authalg]
                                ).digest()[:ICV_LEN[self.authalg]]
        self.bmc.established(self)
        # Sent in clear, before the session's integrity and encryption
        # start (what pyghmi's own _send_rakp4 does, with suite 3 only).
        self.send_payload(payload, RAKP4, retry=False)
        # pyghmi's integrity trailer (both ways) follows currhashlib and
        # currhashlen; pyghmi itself only ever sets SHA1-96.
        self.currhashlib, self.currhashlen = INTEGRITY.get(
            self.integalg, (hashlib.sha1, 12))
        self.integrityalgo = self.integalg
        self.confalgo = 'aes' if self.conf == 1 else 0
        self.sequencenumber = 1
        self.sessionid = u32(self.clientsessionid)
        self.localsid = self.bmcsid
        self.ipmicallback = self.handle_client_request
        self.established = True

    def _short_reply(self, payload_type, tag, status):
        self.send_payload(bytearray([tag, status, 0, 0])
                          + self.clientsessionid, payload_type, retry=False)

    # -- requests in the session ---------------------------------------------
    def handle_client_request(self, request):
        self.last_active = time.monotonic()
        netfn, command, data = request['netfn'], request['command'], \
            request['data']
        if netfn == 6 and command == 0x3b:  # Set Session Privilege Level
            wanted = data[0] & 0x0f if data else 0
            if wanted > self.maxpriv:
                return self.send_ipmi_response(code=0x81)
            if wanted:
                self.clientpriv = wanted
            return self.send_ipmi_response(data=[self.clientpriv])
        if netfn == 6 and command == 0x3c:  # Close Session
            # pyghmi closes the session the request came in, whatever ID
            # it names; a BMC closes the session of that ID, which may be
            # another one (a console freeing a slot it no longer uses).
            sid = u32(data[0:4]) if len(data) >= 4 else 0
            if sid in (0, self.bmcsid):
                # Forgotten before the answer: a console that then asks
                # for the counters sees the session gone.
                self.bmc.forget(self)
                return self.send_ipmi_response()
            if self.bmc.close_by_id(sid):
                return self.send_ipmi_response()
            return self.send_ipmi_response(code=0x87)  # invalid session ID
        if netfn == 6 and command == 0x54:  # Get Channel Cipher Suites
            # pyghmi answers it only outside a session.
            index = data[2] & 0x3f if len(data) > 2 else 0
            return self.send_ipmi_response(
                data=self.bmc.cipher_suite_records(index))
        self.bmc.handle_raw_request(request, self)

    def close_server_session(self):
        self.bmc.forget(self)

    # -- hostile replies -----------------------------------------------------
    def send_payload(self, payload=(), payload_type=None, retry=True,
                     delay_xmit=None, needskeepalive=False, timeout=None):
        quirk = None
        if self.established and payload_type == IPMI:
            quirk = self.bmc.reply_quirk_for(self.clientnetfn - 1,
                                             self.clientcommand)
        if quirk == 'no-integrity':
            # The reply leaves the session's integrity and confidentiality
            # off: payload type without its authenticated and encrypted
            # bits, no trailer, no AuthCode, the payload in clear. Its
            # content is the true answer.
            # (Counted first: the console may ask for the counters as soon
            # as it has the reply.)
            self.bmc.count('hostile_replies')
            saved = (self.integrityalgo, self.confalgo)
            self.integrityalgo, self.confalgo = 0, 0
            try:
                super().send_payload(payload, payload_type, retry,
                                     delay_xmit, needskeepalive, timeout)
            finally:
                self.integrityalgo, self.confalgo = saved
            return
        if quirk == 'bad-integrity':
            # The reply is framed and encrypted as the session wants, but
            # its AuthCode is wrong (see _xmit_packet).
            self.corrupt_next = True
            self.bmc.count('hostile_replies')
        try:
            super().send_payload(payload, payload_type, retry, delay_xmit,
                                 needskeepalive, timeout)
        finally:
            self.corrupt_next = False

    def _xmit_packet(self, retry=True, delay_xmit=None, timeout=None):
        if self.corrupt_next and self.netpacket:
            # The AuthCode ends the packet: flip its last byte.
            self.netpacket = bytearray(self.netpacket)
            self.netpacket[-1] ^= 0xff
        super()._xmit_packet(retry, delay_xmit, timeout)


class Bmc(pyghmi_bmc.Bmc):
    """The chassis, the session table and the quirks."""

    def __init__(self, args, password):
        super().__init__({args.user: password}, port=args.port,
                         address=args.address)
        # pyghmi routes a session's packets by the port it was asked for;
        # with port 0 that must become the port bound.
        self.port = self.serversocket.getsockname()[1]
        self.lock = threading.Lock()
        self.on = not args.start_off
        self.reads_on_until = 0.0
        self.off_delay = args.off_delay
        self.suites = [17, 3] if not args.no_suite17 else [3]
        self.downgrade = args.downgrade
        self.rakp_none = args.rakp_none
        self.skip_password = args.skip_password
        self.malformed_device_id = args.malformed_device_id
        self.session_limit = args.session_limit
        self.session_timeout = args.session_timeout
        self.reply_quirk = ('no-integrity' if args.no_integrity else
                            'bad-integrity' if args.bad_integrity else None)
        self.forge_off = args.forge_off
        self.hostile_only = set(
            "%02x:%02x" % tuple(int(x, 16) for x in c.split(':'))
            for c in args.hostile_only or ())
        self.sessions = {}  # client address -> Session
        self.counters = {'power_commands': 0, 'hostile_replies': 0,
                         'refused': 0, 'downgraded': 0,
                         'skipped_password': 0, 'established': 0,
                         'forged_off': 0}
        self.by_suite = {}
        self.last_refusal = ""

    # -- algorithms ----------------------------------------------------------
    def choose_algorithms(self, asked):
        """(suite, answered algorithms) for the algorithms asked, or None."""
        for suite in self.suites:
            if SUITES[suite] != asked:
                continue
            answer = SUITES[suite]
            if suite == 17 and self.downgrade:
                # --downgrade: what pyghmi does on its own, suite 3's
                # algorithms in answer to suite 17's.
                answer = SUITES[3]
            if self.rakp_none:
                # --rakp-none: RAKP-none as the authentication algorithm.
                answer = (0,) + answer[1:]
            return suite, answer
        return None

    # -- sessions ------------------------------------------------------------
    def track(self, session):
        with self.lock:
            self.prune_locked()
            self.sessions[session.sockaddr] = session

    def established(self, session):
        with self.lock:
            self.counters['established'] += 1
            self.by_suite[session.suite] = \
                self.by_suite.get(session.suite, 0) + 1

    def full(self, addr):
        if not self.session_limit:
            return False
        with self.lock:
            self.prune_locked()
            others = [a for a in self.sessions if a != addr]
            return len(others) >= self.session_limit

    def prune_locked(self):
        now = time.monotonic()
        for addr, s in list(self.sessions.items()):
            if now - s.last_active > self.session_timeout:
                log("session 0x%08x expired", s.bmcsid)
                del self.sessions[addr]
                self.drop_handler(s)

    def forget(self, session, handlers=True):
        log("session 0x%08x from %s ended", getattr(session, 'bmcsid', 0),
            session.sockaddr)
        with self.lock:
            if self.sessions.get(session.sockaddr) is session:
                del self.sessions[session.sockaddr]
        if handlers:
            self.drop_handler(session)

    def drop_handler(self, session):
        # Later packets from that address reach sessionless_data again.
        handlers = ipmisession.Session.bmc_handlers.get(session.sockaddr)
        if handlers and handlers.get(self.port) is session:
            del handlers[self.port]
            if not handlers:
                del ipmisession.Session.bmc_handlers[session.sockaddr]

    def close_by_id(self, sid):
        with self.lock:
            found = [s for s in self.sessions.values() if s.bmcsid == sid]
        for s in found:
            self.forget(s)
        return bool(found)

    def live_sessions(self):
        now = time.monotonic()
        with self.lock:
            return sum(1 for s in self.sessions.values()
                       if now - s.last_active <= self.session_timeout)

    def count(self, name):
        with self.lock:
            self.counters[name] += 1

    def reply_quirk_for(self, netfn, command):
        with self.lock:
            quirk = self.reply_quirk
        if quirk and self.hostile_only and \
                "%02x:%02x" % (netfn, command) not in self.hostile_only:
            return None
        return quirk

    # -- sessionless requests --------------------------------------------------
    def sessionless_data(self, data, sockaddr):
        data = bytearray(data)
        if (len(data) >= 22 and data[0] == 6 and data[2:4] == b'\xff\x07'
                and data[4] == 6 and data[5] == 0x10):
            # An Open Session request: pyghmi builds its own ServerSession
            # here; ours, and one refused leaves no handler behind.
            s = Session(self.authdata, self.kg, sockaddr, self.serversocket,
                        data[16:], self.uuid, bmc=self)
            if s.refused:
                self.drop_handler(s)
            return
        super().sessionless_data(data, sockaddr)

    def send_cipher_suites(self, myaddr, mylun, clientaddr, clientlun,
                           clientseq, data, sockaddr):
        # pyghmi always lists suite 3 alone; here the suites offered, 16
        # bytes of records per list index (22.15).
        index = data[22] & 0x3f if len(data) > 22 else 0
        body = bytearray([0]) + self.cipher_suite_records(index)
        ipmihdr = bytearray([clientaddr, clientlun | (7 << 2)])
        ipmihdr.append(ipmisession._checksum(*ipmihdr))
        rs = bytearray([myaddr, mylun | clientseq << 2, 0x54]) + body
        rs.append(ipmisession._checksum(*rs))
        msg = ipmihdr + rs
        pkt = bytearray(b'\x06\x00\xff\x07\x06\x00' + b'\x00' * 8) + \
            struct.pack('<H', len(msg)) + msg
        ipmisession._io_sendto(self.serversocket, pkt, sockaddr)

    def cipher_suite_records(self, index):
        """Get Channel Cipher Suites' answer for one list index: the
        channel, then 16 bytes of the offered suites' records (22.15)."""
        records = bytearray()
        for suite in sorted(self.suites):
            a, i, c = SUITES[suite]
            records += bytearray([0xc0, suite, a, 0x40 | i, 0x80 | c])
        return bytearray([1]) + records[16 * index:16 * index + 16]

    # -- chassis ----------------------------------------------------------------
    def get_power_state(self):
        with self.lock:
            on = self.on or time.monotonic() < self.reads_on_until
        return 'on' if on else 'off'

    def set_power(self, on):
        with self.lock:
            if self.on and not on and self.off_delay > 0:
                # --off-delay: the state reads on for a while after
                # power-off, as many BMCs do.
                self.reads_on_until = time.monotonic() + self.off_delay
            if on:
                self.reads_on_until = 0.0
            self.on = on

    def power_off(self):
        self.count('power_commands')
        self.set_power(False)

    def power_shutdown(self):
        self.power_off()

    def power_on(self):
        self.count('power_commands')
        self.set_power(True)

    def power_cycle(self):
        self.count('power_commands')
        if self.get_power_state() == 'off':
            return 0xd5  # not supported in the present state
        self.set_power(False)
        self.set_power(True)

    def power_reset(self):
        self.count('power_commands')

    def is_active(self):
        return self.get_power_state() == 'on'

    def cold_reset(self):
        return 0

    def get_chassis_status(self, session):
        if (self.forge_off and getattr(session, 'established', False)
                and self.reply_quirk_for(0x00, 0x01)):
            # --forge-off: a hostile reply to Get Chassis Status says the
            # power is off, whatever the chassis is: what someone on the
            # management network would forge to fake a fence.
            self.count('forged_off')
            return session.send_ipmi_response(data=[0, 0, 0])
        return super().get_chassis_status(session)

    def send_device_id(self, session):
        if self.malformed_device_id:
            # --malformed-device-id: pyghmi's own reply, 14 bytes.
            return super().send_device_id(session)
        session.send_ipmi_response(data=[
            0x20, 0x01,        # device ID, revision
            0x01, 0x00,        # firmware 1.00
            0x02,              # IPMI 2.0
            0x80,              # additional device support: chassis
            0x00, 0x00, 0x00,  # manufacturer ID
            0x00, 0x00,        # product ID
            0, 0, 0, 0,        # auxiliary firmware revision
        ])

    def status(self):
        with self.lock:
            out = dict(self.counters)
            out['power'] = self.on or time.monotonic() < self.reads_on_until
            out['by_suite'] = {str(k): v for k, v in self.by_suite.items()}
            out['last_refusal'] = self.last_refusal
            out['reply_quirk'] = self.reply_quirk or 'honest'
        out['sessions'] = self.live_sessions()
        return out


def control(b):
    """The test's commands on stdin; end of stdin ends the BMC."""
    for line in sys.stdin:
        words = line.split()
        try:
            if words == ['status']:
                answer = json.dumps(b.status())
            elif len(words) == 2 and words[0] == 'power' and \
                    words[1] in ('on', 'off'):
                b.set_power(words[1] == 'on')
                answer = 'ok'
            elif len(words) == 2 and words[0] == 'reply' and words[1] in (
                    'honest', 'no-integrity', 'bad-integrity'):
                with b.lock:
                    b.reply_quirk = None if words[1] == 'honest' else words[1]
                answer = 'ok'
            else:
                answer = 'error unknown command %r' % line.strip()
        except Exception as e:  # the test sees it, the BMC goes on
            answer = 'error %s' % e
        sys.stdout.write(answer + '\n')
        sys.stdout.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--address', default='127.0.0.1')
    p.add_argument('--port', type=int, default=0)
    p.add_argument('--user', default='admin')
    p.add_argument('--start-off', action='store_true')
    p.add_argument('--off-delay', type=float, default=0)
    p.add_argument('--no-suite17', action='store_true')
    p.add_argument('--malformed-device-id', action='store_true')
    p.add_argument('--no-integrity', action='store_true')
    p.add_argument('--bad-integrity', action='store_true')
    p.add_argument('--hostile-only', action='append', metavar='NETFN:CMD',
                   help='hostile replies only to these requests '
                        '(hex, e.g. 00:01 for Get Chassis Status)')
    p.add_argument('--forge-off', action='store_true')
    p.add_argument('--downgrade', action='store_true')
    p.add_argument('--skip-password', action='store_true')
    p.add_argument('--rakp-none', action='store_true')
    p.add_argument('--session-limit', type=int, default=0)
    p.add_argument('--session-timeout', type=float, default=60)
    args = p.parse_args()
    password = os.environ.get('PYGHMI_BMC_PASSWORD', 'password')
    b = Bmc(args, password)
    threading.Thread(target=control, args=(b,), daemon=True).start()
    sys.stdout.write('ready %d\n' % b.port)
    sys.stdout.flush()
    log("listening on %s:%d, suites %s", args.address, b.port, b.suites)
    while True:
        try:
            ipmisession.Session.wait_for_rsp(30)
        except Exception:
            # One bad packet must not end the BMC.
            traceback.print_exc()


if __name__ == '__main__':
    main()
