/**
 * `npm run docs:dashboard`: synthesizes the stack as shipped and draws the API's dashboard
 * from the template into docs/api-dashboard.svg (lib/dashboard-picture.ts).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { BackendStack } from '../lib/constructs/stack.js';
import { API_DASHBOARD_PICTURE, API_DASHBOARD_TITLE, dashboardBody, dashboardSvg } from '../lib/dashboard-picture.js';

const context = JSON.parse(readFileSync(new URL('../cdk.json', import.meta.url), 'utf8')).context;
const app = new App({ context: { ...context, alertEmail: 'none' } });
const stack = new BackendStack(app, 'EcsSaasBackend', { alertEmail: 'none' });
const template = app.synth().getStackByName(stack.stackName).template as { Resources: Parameters<typeof dashboardBody>[0] };
writeFileSync(API_DASHBOARD_PICTURE, dashboardSvg(dashboardBody(template.Resources, stack.stackName, 'api'), API_DASHBOARD_TITLE));
console.log(`wrote ${API_DASHBOARD_PICTURE.pathname}`);
