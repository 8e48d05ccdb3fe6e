/**
 * TRACES=xray: spans as OTLP protobuf, POSTed to X-Ray's OTLP endpoint
 * (https://xray.<region>.amazonaws.com/v1/traces) signed with SigV4 by the task role's
 * credentials; no collector in between (docs/infrastructure.md says why). The endpoint needs
 * CloudWatch Transaction Search on in the account. AWS_ENDPOINT_URL_XRAY points it elsewhere,
 * as for the SDK's own clients. A request never waits longer than EXPORT_TIMEOUT_MS: a slow
 * or dead endpoint costs the batch, never the process.
 */
import { Sha256 } from '@aws-crypto/sha256-js';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import { SignatureV4 } from '@smithy/signature-v4';
import { EXPORT_TIMEOUT_MS } from './keeping-processor.js';


export function xrayEndpoint(region: string, override = process.env.AWS_ENDPOINT_URL_XRAY): URL {
  return new URL('/v1/traces', override ?? `https://xray.${region}.amazonaws.com`);
}

export class XRayOtlpExporter implements SpanExporter {
  private readonly signer: SignatureV4;

  constructor(
    private readonly url: URL,
    region: string,
  ) {
    this.signer = new SignatureV4({ service: 'xray', region, credentials: defaultProvider(), sha256: Sha256 });
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    const signal = AbortSignal.timeout(EXPORT_TIMEOUT_MS);
    // The credentials' look-up is bounded too, not only the POST.
    const timedOut = new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(new Error(`no answer within ${EXPORT_TIMEOUT_MS} ms`)), { once: true }));
    Promise.race([this.send(spans, signal), timedOut]).then(
      () => done({ code: ExportResultCode.SUCCESS }),
      (error: Error) => done({ code: ExportResultCode.FAILED, error }),
    );
  }

  async shutdown(): Promise<void> {}

  private async send(spans: ReadableSpan[], signal: AbortSignal): Promise<void> {
    const body = ProtobufTraceSerializer.serializeRequest(spans);
    if (body === undefined) throw new Error('the spans could not be serialized');
    const signed = await this.signer.sign({
      method: 'POST',
      protocol: this.url.protocol,
      hostname: this.url.hostname,
      port: this.url.port === '' ? undefined : Number(this.url.port),
      path: this.url.pathname,
      query: {},
      headers: { host: this.url.host, 'content-type': 'application/x-protobuf' },
      body,
    });
    const res = await fetch(this.url, { method: 'POST', headers: signed.headers, body, signal });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`X-Ray answered ${res.status}`);
  }
}
