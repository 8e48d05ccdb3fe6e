/** Types of smoke.mjs, for TypeScript callers (bin/smoke.ts and the tests). */
export interface CheckResult {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}
export interface SmokeResult {
  readonly ok: boolean;
  readonly checks: CheckResult[];
}
export declare const REQUEST_TIMEOUT_MS: number;
export declare const CHECKS: readonly { readonly name: string; run(baseUrl: string, operatorKey: string): Promise<string | undefined> }[];
export declare function smokeTest(target: { baseUrl: string; operatorKey: string }): Promise<SmokeResult>;
export declare function describeSmokeResult(baseUrl: string, result: SmokeResult): string;
