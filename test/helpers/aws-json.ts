/**
 * Local stand-ins for AWS services that speak the JSON protocols (Step Functions: awsJson1_0;
 * CloudWatch Logs and ECS: awsJson1_1) and for CloudFormation's Query API, enough for the real SDK
 * clients, pointed at them with AWS_ENDPOINT_URL_<SERVICE> and dummy credentials, to work.
 *
 * A JSON request is `POST /` with `X-Amz-Target: <prefix>.<Operation>` and a JSON body; the
 * answer is JSON, or an error `{"__type": ..., "message": ...}` with status 400. Each test gives
 * the operations it needs as handlers; any other answers UnknownOperationException.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  readonly operation: string;
  readonly body: Record<string, any>;
  /** Proof the SDK signed it. */
  readonly authorization: string | undefined;
  readonly contentType: string | undefined;
}

/** An error a handler throws to answer with that AWS error. */
export class AwsError extends Error {
  constructor(readonly type: string, message: string) {
    super(message);
  }
}

export interface FakeService {
  readonly url: string;
  readonly requests: RecordedRequest[];
  close(): Promise<void>;
}

type Handler = (body: Record<string, any>) => unknown;

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => resolve(body));
  });
}

/** A JSON-protocol service whose X-Amz-Target prefix is `targetPrefix` (e.g. `AWSStepFunctions`). */
export async function startFakeJsonService(targetPrefix: string, version: '1.0' | '1.1', handlers: Record<string, Handler>): Promise<FakeService> {
  const requests: RecordedRequest[] = [];
  const contentType = `application/x-amz-json-${version}`;
  const server = http.createServer(async (req, res) => {
    const text = await readBody(req);
    const target = String(req.headers['x-amz-target'] ?? '');
    const operation = target.startsWith(`${targetPrefix}.`) ? target.slice(targetPrefix.length + 1) : target;
    const body = text ? (JSON.parse(text) as Record<string, any>) : {};
    requests.push({ operation, body, authorization: req.headers.authorization, contentType: req.headers['content-type'] });
    const send = (status: number, payload: unknown) => {
      res.writeHead(status, { 'content-type': contentType, 'x-amzn-requestid': randomUUID() });
      res.end(JSON.stringify(payload));
    };
    const handler = handlers[operation];
    if (!handler) return send(400, { __type: 'UnknownOperationException', message: `the fake ${targetPrefix} does not know ${target}` });
    try {
      send(200, await handler(body));
    } catch (err) {
      if (err instanceof AwsError) return send(400, { __type: err.type, message: err.message });
      send(500, { __type: 'InternalFailure', message: (err as Error).message });
    }
  });
  const url = await listen(server);
  return { url, requests, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** CloudFormation's Query API, DescribeStacks only: the stacks' outputs, and a status (`status()` at each call). */
export async function startFakeCloudFormation(stacks: Record<string, Record<string, string>>, status: () => string = () => 'UPDATE_COMPLETE'): Promise<FakeService> {
  const requests: RecordedRequest[] = [];
  const xmlns = 'http://cloudformation.amazonaws.com/doc/2010-05-15/';
  const escape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const server = http.createServer(async (req, res) => {
    const form = new URLSearchParams(await readBody(req));
    const operation = form.get('Action') ?? '';
    requests.push({ operation, body: Object.fromEntries(form), authorization: req.headers.authorization, contentType: req.headers['content-type'] });
    const name = form.get('StackName') ?? '';
    const outputs = stacks[name];
    res.setHeader('content-type', 'text/xml');
    if (operation !== 'DescribeStacks' || !outputs) {
      res.statusCode = 400;
      res.end(`<ErrorResponse xmlns="${xmlns}"><Error><Type>Sender</Type><Code>ValidationError</Code><Message>Stack with id ${escape(name)} does not exist</Message></Error><RequestId>${randomUUID()}</RequestId></ErrorResponse>`);
      return;
    }
    const members = Object.entries(outputs).map(([k, v]) => `<member><OutputKey>${escape(k)}</OutputKey><OutputValue>${escape(v)}</OutputValue></member>`).join('');
    res.end(`<DescribeStacksResponse xmlns="${xmlns}"><DescribeStacksResult><Stacks><member><StackName>${escape(name)}</StackName><StackId>arn:aws:cloudformation:us-east-1:123456789012:stack/${escape(name)}/1</StackId><CreationTime>2026-01-01T00:00:00Z</CreationTime><StackStatus>${escape(status())}</StackStatus><Outputs>${members}</Outputs></member></Stacks></DescribeStacksResult><ResponseMetadata><RequestId>${randomUUID()}</RequestId></ResponseMetadata></DescribeStacksResponse>`);
  });
  const url = await listen(server);
  return { url, requests, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** The environment that points the real SDK clients at these fakes, with dummy credentials. */
export function awsEnv(endpoints: { sfn?: string; logs?: string; cloudformation?: string }): Record<string, string> {
  return {
    ...(endpoints.sfn ? { AWS_ENDPOINT_URL_SFN: endpoints.sfn } : {}),
    ...(endpoints.logs ? { AWS_ENDPOINT_URL_CLOUDWATCH_LOGS: endpoints.logs } : {}),
    ...(endpoints.cloudformation ? { AWS_ENDPOINT_URL_CLOUDFORMATION: endpoints.cloudformation } : {}),
    AWS_ACCESS_KEY_ID: 'AKIDTEST',
    AWS_SECRET_ACCESS_KEY: 'test-secret',
    AWS_REGION: 'us-east-1',
  };
}
