/**
 * A client that declares a huge body and sends it as fast as the socket takes it, until the
 * server closes the connection: what an early answer's drain must bound (app/early-answer.ts).
 */
import net from 'node:net';

export interface Flooded {
  /** The answer's head, as sent. */
  readonly head: string;
  /** Bytes this client handed to its kernel before the connection closed. */
  readonly clientWrote: number;
  readonly closedAfterMs: number;
}

/** Sends `head`, then body bytes, until the server closes; rejects if it is still reading after `giveUpMs`. */
export function flood(port: number, head: string, giveUpMs = 20_000): Promise<Flooded> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunk = Buffer.alloc(64 * 1024, 0x5b);
    const t0 = Date.now();
    let answer = '';
    const giveUp = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept reading for ${giveUpMs} ms`));
    }, giveUpMs);
    const pump = () => {
      while (socket.writable && socket.write(chunk));
    };
    socket.on('connect', () => {
      socket.write(head);
      pump();
    });
    socket.on('drain', pump);
    socket.on('data', (d) => (answer += d.toString('latin1')));
    socket.on('error', () => undefined);
    socket.once('close', () => {
      clearTimeout(giveUp);
      resolve({ head: answer.split('\r\n\r\n')[0]!, clientWrote: socket.bytesWritten, closedAfterMs: Date.now() - t0 });
    });
  });
}

/** Requests that each get an answer before their body: `[what, status, head]`, for a server whose admin key is `adminKey` and body limit is under 100 GB. */
export function earlyAnswerCases(adminKey: string): [string, string, string][] {
  const madeUpKey = `sbk_${'A'.repeat(43)}`;
  const huge = 'Content-Length: 100000000000';
  return [
    ['no key', '401', `POST /accounts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${huge}\r\n\r\n`],
    ['a made-up key', '401', `POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${madeUpKey}\r\nContent-Type: application/json\r\n${huge}\r\n\r\n`],
    ['a method the path does not serve', '405', `PUT /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\nContent-Type: application/json\r\n${huge}\r\n\r\n`],
    ['a body that is not JSON', '415', `POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\nContent-Type: text/plain\r\n${huge}\r\n\r\n`],
    ['a body over the limit, declared', '413', `POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\nContent-Type: application/json\r\n${huge}\r\n\r\n`],
    ['a chunked body past the limit', '413', `POST /accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminKey}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n7fffffff\r\n`],
    ['the health check, with a body', '200', `GET /livez HTTP/1.1\r\nHost: x\r\n${huge}\r\n\r\n`],
  ];
}
