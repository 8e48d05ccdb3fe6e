/**
 * The AWS WAF web ACL on the API's load balancer: a per-IP rate limit, a per-key rate limit
 * (the Authorization header), then AWS's managed common rule set (the OWASP-style checks). On
 * by default in prod, off in dev for its cost (WAF_DEFAULTS.monthlyPriceUsd a month plus a
 * price per million requests).
 *
 * The per-key rule aggregates on the Authorization header after COMPRESS_WHITE_SPACE and
 * LOWERCASE, so `Bearer k`, `bearer  k` and `BEARER k` count as one key: the server accepts
 * all three. A request without the header is not counted by it (WAF skips requests that lack
 * a custom key); the per-IP rule still counts it.
 */
import { Stack } from 'aws-cdk-lib';
import type * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as wafv2 from 'aws-cdk-lib/aws-wafv2';
import { Construct } from 'constructs';
import { WAF_DEFAULTS } from '../defaults.js';
import { Problems, throwIfProblems } from './validation.js';

export interface ApiFirewallProps {
  /** The load balancer to protect. */
  readonly loadBalancer: elbv2.IApplicationLoadBalancer;
  /** Requests one client IP may send in any 5 minutes before WAF blocks it. @default 2000 */
  readonly rateLimit?: number;
  /** Requests one API key may send in any 5 minutes before WAF blocks it. @default 6000 */
  readonly keyRateLimit?: number;
}

/** WAF's rate-based rules accept limits in this range. */
const RATE_LIMIT = { min: 10, max: 2_000_000_000 } as const;

/** Every problem with `props`. */
export function validateApiFirewallProps(props: Partial<ApiFirewallProps>): string[] {
  const problems = new Problems();
  problems.whole('wafRateLimit', props.rateLimit, RATE_LIMIT.min, RATE_LIMIT.max);
  problems.whole('wafKeyRateLimit', props.keyRateLimit, RATE_LIMIT.min, RATE_LIMIT.max);
  return problems.list;
}

export class ApiFirewall extends Construct {
  public readonly webAcl: wafv2.CfnWebACL;

  constructor(scope: Construct, id: string, props: ApiFirewallProps) {
    throwIfProblems('The web ACL', validateApiFirewallProps(props));
    super(scope, id);
    const prefix = Stack.of(this).stackName;
    const visibility = (name: string): wafv2.CfnWebACL.VisibilityConfigProperty => ({
      cloudWatchMetricsEnabled: true,
      metricName: `${prefix}-${name}`,
      sampledRequestsEnabled: true,
    });

    this.webAcl = new wafv2.CfnWebACL(this, 'WebAcl', {
      scope: 'REGIONAL',
      defaultAction: { allow: {} },
      visibilityConfig: visibility('api'),
      rules: [
        {
          // First, so a flood is cut off before the managed rules spend capacity on it.
          name: 'RateLimitPerIp',
          priority: 0,
          action: { block: {} },
          statement: { rateBasedStatement: { limit: props.rateLimit ?? WAF_DEFAULTS.rateLimit, aggregateKeyType: 'IP' } },
          visibilityConfig: visibility('rate-limit'),
        },
        {
          name: 'RateLimitPerKey',
          priority: 1,
          action: { block: {} },
          statement: {
            rateBasedStatement: {
              limit: props.keyRateLimit ?? WAF_DEFAULTS.keyRateLimit,
              aggregateKeyType: 'CUSTOM_KEYS',
              customKeys: [
                {
                  header: {
                    name: 'authorization',
                    textTransformations: [
                      { priority: 0, type: 'COMPRESS_WHITE_SPACE' },
                      { priority: 1, type: 'LOWERCASE' },
                    ],
                  },
                },
              ],
            },
          },
          visibilityConfig: visibility('key-rate-limit'),
        },
        {
          name: 'AwsCommonRuleSet',
          priority: 2,
          overrideAction: { none: {} },
          statement: { managedRuleGroupStatement: { vendorName: 'AWS', name: 'AWSManagedRulesCommonRuleSet' } },
          visibilityConfig: visibility('common-rules'),
        },
      ],
    });
    new wafv2.CfnWebACLAssociation(this, 'Association', {
      resourceArn: props.loadBalancer.loadBalancerArn,
      webAclArn: this.webAcl.attrArn,
    });
  }
}
