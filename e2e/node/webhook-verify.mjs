// Verifies Standard Webhooks signatures with the reference implementation
// (the standardwebhooks package): reads [{secret, headers, body}] as JSON
// on stdin and prints, for each, "ok" or the verification error.
import { Webhook } from 'standardwebhooks';

let input = '';
for await (const chunk of process.stdin) input += chunk;
for (const { secret, headers, body } of JSON.parse(input)) {
  try {
    new Webhook(secret).verify(body, headers);
    console.log('ok');
  } catch (e) {
    console.log(`refused: ${e.message}`);
  }
}
