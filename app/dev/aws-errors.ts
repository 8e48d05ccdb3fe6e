/**
 * What to do about the AWS SDK's set-up errors, in one line each: the SDK says what is
 * missing (`Region is missing`, `Could not load credentials from any providers`), not what to
 * set. Used by `npm run job:aws`, which prints the line instead of the SDK's error.
 */

/** The one-line advice for a set-up error (no region, no or refused credentials), else undefined. */
export function awsSetupAdvice(err: unknown, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const e = err as { name?: string; message?: string };
  const message = String(e?.message ?? '');
  const profile = env.AWS_PROFILE;
  if (/^Region is missing/.test(message)) {
    return `No AWS region: set AWS_REGION (for example AWS_REGION=eu-west-1), or AWS_PROFILE to a profile in ~/.aws/config that has a region${profile ? ` (the profile "${profile}" has none)` : ''}.`;
  }
  if (e?.name === 'CredentialsProviderError' || e?.name === 'TokenProviderError' || /could not load credentials/i.test(message)) {
    if (profile) return `No AWS credentials for the profile "${profile}": run \`aws sso login --profile ${profile}\` if it signs in with SSO, else check its entry in ~/.aws/config and ~/.aws/credentials (the SDK said: ${message.split('\n')[0]}).`;
    return 'No AWS credentials: set AWS_PROFILE to a profile in ~/.aws/config (then `aws sso login` if it signs in with SSO), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.';
  }
  if (['ExpiredTokenException', 'ExpiredToken', 'UnrecognizedClientException', 'InvalidClientTokenId'].includes(e?.name ?? '')) {
    return `AWS refused the credentials (${e.name}): sign in again (\`aws sso login${profile ? ` --profile ${profile}` : ''}\`), or set fresh AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.`;
  }
  return undefined;
}
