/**
 * HTTPS by default: with a domain the stack makes a DNS-validated certificate, an HTTPS listener,
 * a permanent redirect from HTTP and an alias record; prod refuses to synth without HTTPS unless
 * told something else terminates TLS.
 */
import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { settingsFromContext } from '../../lib/constructs/settings.js';
import { errorMessage, newApp, resources, synth, TEST_DOMAIN } from './synth.js';

describe('the API\'s domain', () => {
  const { stack, template } = synth({ service: { domain: TEST_DOMAIN } });

  it('gets a certificate validated through DNS records in its hosted zone, found by id (no lookup)', () => {
    template.hasResourceProperties('AWS::CertificateManager::Certificate', {
      DomainName: 'api.acme.io',
      ValidationMethod: 'DNS',
      DomainValidationOptions: [{ DomainName: 'api.acme.io', HostedZoneId: 'Z0123456789ABCDEFGHIJ' }],
    });
    template.resourceCountIs('AWS::Route53::HostedZone', 0);
  });

  it('serves HTTPS on 443 with that certificate and a recommended TLS policy, and redirects HTTP permanently', () => {
    const certificate = stack.getLogicalId(stack.webService.domain!.certificate!.node.defaultChild as never);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 443,
      Protocol: 'HTTPS',
      Certificates: [{ CertificateArn: { Ref: certificate } }],
      SslPolicy: Match.stringLikeRegexp('^ELBSecurityPolicy-TLS13'),
    });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 80,
      Protocol: 'HTTP',
      DefaultActions: [{ Type: 'redirect', RedirectConfig: { Protocol: 'HTTPS', Port: '443', StatusCode: 'HTTP_301' } }],
    });
    template.resourceCountIs('AWS::ElasticLoadBalancingV2::Listener', 2);
  });

  it('points the name at the load balancer with an alias record, and the ApiUrl output names it', () => {
    const alb = stack.getLogicalId(stack.webService.loadBalancer.node.defaultChild as never);
    template.hasResourceProperties('AWS::Route53::RecordSet', {
      Name: 'api.acme.io.',
      Type: 'A',
      HostedZoneId: 'Z0123456789ABCDEFGHIJ',
      AliasTarget: { DNSName: Match.objectLike({ 'Fn::Join': Match.arrayWith([Match.arrayWith([Match.objectLike({ 'Fn::GetAtt': [alb, 'DNSName'] })])]) }) },
    });
    expect(template.toJSON().Outputs.ApiUrl.Value).toBe('https://api.acme.io');
  });
});

describe('the HTTPS settings', () => {
  const settings = (context: Record<string, unknown>) => settingsFromContext(newApp(context).node);

  it('refuse a prod stage without HTTPS, naming the settings that give it and the opt-out', () => {
    const message = errorMessage(() => settings({ stage: 'prod' }));
    expect(message).toContain('stage prod serves the API over HTTPS: set domainName, hostedZoneId and hostedZoneName');
    expect(message).toContain('or certificateArn');
    expect(message).toContain('-c allowHttp=true');
  });

  it('accept prod with a domain, with an existing certificate, or with allowHttp=true; dev needs none', () => {
    expect(settings({ stage: 'prod', ...TEST_DOMAIN }).props.service?.domain).toEqual(TEST_DOMAIN);
    expect(() => settings({ stage: 'prod', certificateArn: 'arn:aws:acm:eu-west-1:123456789012:certificate/abc' })).not.toThrow();
    expect(() => settings({ stage: 'prod', allowHttp: 'true' })).not.toThrow();
    expect(() => settings({ stage: 'dev' })).not.toThrow();
  });

  it('report every problem of a domain at once: a missing key, and a name outside its zone or a bad zone id', () => {
    expect(errorMessage(() => settings({ stage: 'prod', domainName: 'api.acme.io' })))
      .toContain('domainName, hostedZoneId and hostedZoneName go together (the certificate is validated, and the alias record made, in that zone); got only domainName');
    const message = errorMessage(() => settings({ domainName: 'api.other.io', hostedZoneId: 'zone', hostedZoneName: 'acme.io', minCapacity: 0 }));
    expect(message).toContain('domainName api.other.io is not in the hosted zone acme.io');
    expect(message).toContain('hostedZoneId must be a Route 53 hosted zone id like Z0123456789ABCDEFGHIJ, got "zone"');
    expect(message).toContain('minCapacity');
  });

  it('make no certificate when an existing one is given with the domain, and keep the alias record', () => {
    const certificateArn = 'arn:aws:acm:eu-west-1:123456789012:certificate/abc';
    const { template } = synth({ service: { domain: TEST_DOMAIN, certificateArn } });
    template.resourceCountIs('AWS::CertificateManager::Certificate', 0);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', { Port: 443, Certificates: [{ CertificateArn: certificateArn }] });
    expect(Object.keys(resources(template, 'AWS::Route53::RecordSet'))).toHaveLength(1);
  });
});
