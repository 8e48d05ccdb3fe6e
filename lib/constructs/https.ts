/**
 * HTTPS for the API's own domain: a DNS-validated ACM certificate in the given hosted zone, and
 * the alias record that points the name at the load balancer. The zone is named by its id and
 * name (no lookup), so synth stays offline.
 */
import * as acm from 'aws-cdk-lib/aws-certificatemanager';
import type * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as route53 from 'aws-cdk-lib/aws-route53';
import * as targets from 'aws-cdk-lib/aws-route53-targets';
import { Token } from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { Problems } from './validation.js';

export interface ApiDomainProps {
  /** The API's name, like `api.acme.io`: inside the hosted zone. */
  readonly domainName: string;
  /** The Route 53 public hosted zone's id, like `Z0123456789ABCDEFGHIJ`. */
  readonly hostedZoneId: string;
  /** The hosted zone's name, like `acme.io`. */
  readonly hostedZoneName: string;
}

const DOMAIN = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/;
const ZONE_ID = /^Z[A-Z0-9]{1,31}$/;

/** Every problem with a domain's settings, by their context keys' names. */
export function validateApiDomainProps(props: Partial<ApiDomainProps>): string[] {
  const problems = new Problems();
  const given = (['domainName', 'hostedZoneId', 'hostedZoneName'] as const).filter((k) => props[k] !== undefined);
  if (given.length > 0 && given.length < 3) {
    problems.add(`domainName, hostedZoneId and hostedZoneName go together (the certificate is validated, and the alias record made, in that zone); got only ${given.join(', ')}`);
    return problems.list;
  }
  const { domainName, hostedZoneId, hostedZoneName } = props;
  if (domainName === undefined || hostedZoneId === undefined || hostedZoneName === undefined) return [];
  if ([domainName, hostedZoneId, hostedZoneName].some((v) => Token.isUnresolved(v))) return [];
  if (!DOMAIN.test(domainName)) problems.add(`domainName must be a lower-case DNS name like api.acme.io, got ${JSON.stringify(domainName)}`);
  if (!DOMAIN.test(hostedZoneName)) problems.add(`hostedZoneName must be a lower-case DNS name like acme.io, got ${JSON.stringify(hostedZoneName)}`);
  else if (domainName !== hostedZoneName && !domainName.endsWith(`.${hostedZoneName}`)) {
    problems.add(`domainName ${domainName} is not in the hosted zone ${hostedZoneName}`);
  }
  if (!ZONE_ID.test(hostedZoneId)) problems.add(`hostedZoneId must be a Route 53 hosted zone id like Z0123456789ABCDEFGHIJ, got ${JSON.stringify(hostedZoneId)}`);
  return problems.list;
}

/** The certificate of an API domain; create it before the HTTPS listener, which needs it. */
export class ApiDomain extends Construct {
  public readonly zone: route53.IHostedZone;
  /** Validated through a CNAME record CloudFormation writes into the zone; undefined when an existing certificate serves. */
  public readonly certificate: acm.Certificate | undefined;
  /** The alias record; set by pointTo(). */
  public record: route53.ARecord | undefined;

  constructor(scope: Construct, id: string, private readonly props: ApiDomainProps, options: { readonly newCertificate: boolean } = { newCertificate: true }) {
    super(scope, id);
    this.zone = route53.HostedZone.fromHostedZoneAttributes(this, 'Zone', { hostedZoneId: props.hostedZoneId, zoneName: props.hostedZoneName });
    this.certificate = options.newCertificate ? new acm.Certificate(this, 'Certificate', {
      domainName: props.domainName,
      validation: acm.CertificateValidation.fromDns(this.zone),
    }) : undefined;
  }

  /**
   * Points the domain at `loadBalancer` with an alias A record. No AAAA record: the load balancer
   * is IPv4-only (the VPC has no IPv6 range), and an AAAA alias to it would answer nothing.
   */
  pointTo(loadBalancer: elbv2.IApplicationLoadBalancer): void {
    this.record = new route53.ARecord(this, 'Alias', {
      zone: this.zone,
      recordName: this.props.domainName,
      target: route53.RecordTarget.fromAlias(new targets.LoadBalancerTarget(loadBalancer)),
    });
  }
}
