/** Types of smoke-test.mjs, for the construct and the tests. */
export declare const HOOK_ENV: {
  readonly baseUrl: string;
  readonly operatorKeySecret: string;
  readonly attempts: string;
  readonly retrySeconds: string;
};
export interface HookEvent {
  readonly serviceArn?: string;
  readonly targetServiceRevisionArn?: string;
  readonly hookDetails?: { readonly attempt?: number };
}
export interface HookAnswer {
  readonly hookStatus: 'SUCCEEDED' | 'FAILED' | 'IN_PROGRESS';
  readonly callBackDelay?: number;
  readonly hookDetails?: { readonly attempt: number };
}
export declare function handler(event: HookEvent): Promise<HookAnswer>;
