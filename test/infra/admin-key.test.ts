import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { CONTAINER } from '../../lib/defaults.js';
import { resources, synth } from './synth.js';

describe('the admin API key', () => {
  const { template } = synth();

  it('is generated in Secrets Manager and injected into the API container as a secret, never as plain environment', () => {
    const [secretId] = Object.entries(resources(template, 'AWS::SecretsManager::Secret')).find(([id]) => id.includes('AdminApiKey'))!;
    template.hasResourceProperties('AWS::SecretsManager::Secret', {
      GenerateSecretString: Match.objectLike({ PasswordLength: 64, ExcludePunctuation: true }),
    });
    const [, api] = Object.entries(resources(template, 'AWS::ECS::TaskDefinition')).find(([id]) => id.startsWith('Api'))!;
    const container = api.Properties.ContainerDefinitions.find((c: { Name: string }) => c.Name === CONTAINER.name);
    expect(container.Secrets).toContainEqual({ Name: 'ADMIN_API_KEY', ValueFrom: { Ref: secretId } });
    expect((container.Environment ?? []).map((e: { Name: string }) => e.Name)).not.toContain('ADMIN_API_KEY');
  });

  it('reaches no job: only the API container gets it', () => {
    for (const [id, taskDef] of Object.entries(resources(template, 'AWS::ECS::TaskDefinition'))) {
      if (id.startsWith('Api')) continue;
      for (const c of taskDef.Properties.ContainerDefinitions) {
        expect({ id, secrets: (c.Secrets ?? []).map((s: { Name: string }) => s.Name) }).not.toEqual({ id, secrets: expect.arrayContaining(['ADMIN_API_KEY']) });
      }
    }
  });
});
