// sluice tests: an upstream that switches to HTTP/2 when asked (h2c).
//
//   node h2c_upstream.js RAW_PORT H2_PORT
//
// H2_PORT: Node's own HTTP/2 server without TLS (h2c with prior knowledge);
// it answers every request with JSON {"h2":true,"path":...}.
// RAW_PORT: HTTP/1.1 over plain sockets, for what Node's http module does
// not do (Upgrade: h2c):
//   - a request with Upgrade: 101 naming its first protocol (or "h2c" for a
//     path starting /as-h2c), then the connection is HTTP/2 (handed to the
//     server above) for h2c, or an echo of every byte for anything else;
//   - a path starting /force101: 101 Upgrade: h2c whatever was asked;
//   - anything else: 200 with JSON {"path":...,"headers":{name: value}}
//     (names lower-cased, repeats joined with ", "), keep-alive.
// It prints "listening RAW_PORT H2_PORT" once both listen.
'use strict';
const net = require('net');
const http2 = require('http2');

const rawPort = Number(process.argv[2]);
const h2Port = Number(process.argv[3]);

const h2 = http2.createServer((req, res) => {
  const body = JSON.stringify({ h2: true, path: req.url });
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
});
h2.on('sessionError', () => {});

function serve(sock) {
  let buf = Buffer.alloc(0);
  let done = false;
  const onData = (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (done) return;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.subarray(0, end).toString('latin1').split('\r\n');
      const [method, path] = head[0].split(' ');
      const headers = {};
      for (const line of head.slice(1)) {
        const c = line.indexOf(':');
        const name = line.slice(0, c).toLowerCase();
        const value = line.slice(c + 1).trim();
        headers[name] = name in headers ? headers[name] + ', ' + value : value;
      }
      const len = Number(headers['content-length'] || 0);
      if (buf.length < end + 4 + len) return;
      let rest = buf.subarray(end + 4 + len);
      buf = Buffer.alloc(0);
      let proto = null;
      if (path.startsWith('/force101')) proto = 'h2c';
      else if ('upgrade' in headers)
        proto = path.startsWith('/as-h2c') ? 'h2c' : headers.upgrade.split(',')[0].trim();
      if (proto !== null) {
        done = true;
        sock.removeListener('data', onData);
        sock.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ' + proto +
                   '\r\n\r\n');
        if (proto.toLowerCase() === 'h2c') {
          if (rest.length > 0) sock.unshift(rest);
          h2.emit('connection', sock);
        } else {
          if (rest.length > 0) sock.write(rest);
          sock.on('data', (d) => sock.write(d));
        }
        return;
      }
      const body = JSON.stringify({ method, path, headers });
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ' +
                 Buffer.byteLength(body) + '\r\n\r\n' + body);
      buf = rest;
    }
  };
  sock.on('data', onData);
  sock.on('error', () => {});
}

const raw = net.createServer(serve);
let up = 0;
const ready = () => { if (++up === 2) console.log('listening ' + rawPort + ' ' + h2Port); };
raw.listen(rawPort, '127.0.0.1', ready);
h2.listen(h2Port, '127.0.0.1', ready);
