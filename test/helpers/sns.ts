/**
 * A local stand-in for Amazon SNS that speaks the Query API, enough for the real
 * @aws-sdk/client-sns (pointed at it with AWS_ENDPOINT_URL_SNS) to publish: it parses the
 * form-encoded `Action=Publish` request, records the message, and answers the XML
 * PublishResponse with a MessageId. Any other action gets a Query API error.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface PublishedMessage {
  readonly topicArn: string;
  readonly subject: string | undefined;
  readonly message: string;
  readonly messageId: string;
  /** The request's Authorization header: proof the SDK signed it. */
  readonly authorization: string | undefined;
}

export interface FakeSns {
  /** For AWS_ENDPOINT_URL_SNS. */
  readonly url: string;
  readonly messages: PublishedMessage[];
  /** Every request, Publish or not. */
  readonly requests: number;
  close(): Promise<void>;
}

const XMLNS = 'https://sns.amazonaws.com/doc/2010-03-31/';

export async function startFakeSns(): Promise<FakeSns> {
  const messages: PublishedMessage[] = [];
  let requests = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      requests += 1;
      const form = new URLSearchParams(body);
      const requestId = randomUUID();
      if (req.method !== 'POST' || form.get('Action') !== 'Publish' || !form.get('TopicArn') || !form.get('Message')) {
        res.writeHead(400, { 'content-type': 'text/xml' });
        res.end(
          `<ErrorResponse xmlns="${XMLNS}"><Error><Type>Sender</Type><Code>InvalidParameter</Code><Message>only Publish with TopicArn and Message is supported</Message></Error><RequestId>${requestId}</RequestId></ErrorResponse>`,
        );
        return;
      }
      const messageId = randomUUID();
      messages.push({
        topicArn: form.get('TopicArn')!,
        subject: form.get('Subject') ?? undefined,
        message: form.get('Message')!,
        messageId,
        authorization: req.headers.authorization,
      });
      res.writeHead(200, { 'content-type': 'text/xml', 'x-amzn-requestid': requestId });
      res.end(
        `<?xml version="1.0"?>\n<PublishResponse xmlns="${XMLNS}"><PublishResult><MessageId>${messageId}</MessageId></PublishResult><ResponseMetadata><RequestId>${requestId}</RequestId></ResponseMetadata></PublishResponse>`,
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    messages,
    get requests() {
      return requests;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The environment that points the real SDK at `sns` with dummy credentials. */
export function snsEnv(sns: Pick<FakeSns, 'url'>, topicArn = 'arn:aws:sns:us-east-1:123456789012:job-alerts'): Record<string, string> {
  return {
    ALERT_TOPIC_ARN: topicArn,
    AWS_ENDPOINT_URL_SNS: sns.url,
    AWS_ACCESS_KEY_ID: 'AKIDTEST',
    AWS_SECRET_ACCESS_KEY: 'test-secret',
    AWS_REGION: 'us-east-1',
  };
}
