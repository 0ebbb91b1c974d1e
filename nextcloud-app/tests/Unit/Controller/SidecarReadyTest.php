<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Service\RequestSigner;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Istota\Tests\Support\TestRequest;

/**
 * POST /api/v1/sidecar/ready: the sidecar, back after a restart, asks for the Talk events
 * that waited for it. Only a request signed with the shared secret is heard; anything
 * else is refused (and throttled) and hands nothing over.
 */
class SidecarReadyTest extends HarnessTestCase {
	private const URI = '/ocs/v2.php/apps/istota/api/v1/sidecar/ready';

	protected function setUp(): void {
		parent::setUp();
		$this->h->directory->addUser('alice', 'Alice');
		// Two events that failed once and wait for their next attempt, a minute ahead.
		foreach (['41', '42'] as $id) {
			$message = [
				'type' => 'Create',
				'actor' => ['type' => 'Person', 'id' => 'users/alice', 'name' => 'Alice', 'talkParticipantType' => '3'],
				'object' => ['type' => 'Note', 'id' => $id, 'name' => 'message', 'content' => json_encode(['message' => 'hi', 'parameters' => []]), 'mediaType' => 'text/markdown'],
				'target' => ['type' => 'Collection', 'id' => 'room1', 'name' => 'Room'],
			];
			$body = $this->h->payloads->encode($this->h->payloads->build('nextcloudapp://istota', $message));
			$this->h->outbox->enqueue($body, 'room1', $id, time(), 1, 'down', time() + 60);
		}
	}

	private function call(array $headers): \OCP\AppFramework\Http\DataResponse {
		return $this->h->sidecarController(new TestRequest('POST', $headers + ['OCS-APIRequest' => 'true'], [], self::URI))->ready();
	}

	private function delivered(): int {
		return count(array_filter(self::$sidecar->requests(), static fn (array $r): bool => $r['uri'] === '/v1/talk/events'));
	}

	public function testASignedCallHandsOverEveryWaitingEventAtOnce(): void {
		$headers = (new RequestSigner())->headers(self::SECRET, 'POST', self::URI, '', time());
		$response = $this->call($headers);
		$this->assertSame(200, $response->getStatus());
		$this->assertSame(['delivered' => 2, 'complete' => true], $response->getData());
		$this->assertSame(2, $this->delivered());
		$this->assertSame([], $this->h->outbox->head(10));
	}

	/** @return array<string, array{0: \Closure(): array<string, string>}> */
	public function badCalls(): array {
		return [
			'unsigned' => [static fn (): array => []],
			'another secret' => [static fn (): array => (new RequestSigner())->headers('another-secret-0123456789-abcdefghijklmnopq', 'POST', self::URI, '', time())],
			'another path' => [static fn (): array => (new RequestSigner())->headers(self::SECRET, 'POST', '/ocs/v2.php/apps/istota/api/v1/me', '', time())],
			'stale' => [static fn (): array => (new RequestSigner())->headers(self::SECRET, 'POST', self::URI, '', time() - 600)],
			'a body it did not sign' => [static fn (): array => (new RequestSigner())->headers(self::SECRET, 'POST', self::URI, '{"x":1}', time())],
		];
	}

	/** @dataProvider badCalls */
	public function testAnythingElseIsRefusedThrottledAndHandsNothingOver(\Closure $headers): void {
		$response = $this->call($headers());
		$this->assertSame(401, $response->getStatus());
		$this->assertSame('bad_signature', $response->getData()['code']);
		$this->assertTrue($response->isThrottled());
		$this->assertSame(0, $this->delivered());
		$this->assertCount(2, $this->h->outbox->head(10));
	}

	public function testPostedTellsWhichBotMessagesAreInTheConversation(): void {
		// Talk's tables as Nextcloud 31 has them (the columns the lookup reads).
		$pdo = $this->h->db->pdo();
		$pdo->exec('CREATE TABLE oc_talk_rooms (id INTEGER PRIMARY KEY, token VARCHAR(32))');
		$pdo->exec('CREATE TABLE oc_comments (id INTEGER PRIMARY KEY, actor_type VARCHAR(64), object_type VARCHAR(64), object_id VARCHAR(64), reference_id VARCHAR(64))');
		$pdo->exec("INSERT INTO oc_talk_rooms (id, token) VALUES (7, 'room1'), (8, 'room2')");
		$pdo->exec("INSERT INTO oc_comments (actor_type, object_type, object_id, reference_id) VALUES
			('bots', 'chat', '7', 'ref-posted'),
			('users', 'chat', '7', 'ref-by-a-user'),
			('bots', 'chat', '8', 'ref-elsewhere')");
		$body = json_encode(['token' => 'room1', 'reference_ids' => ['ref-posted', 'ref-by-a-user', 'ref-elsewhere', 'ref-never']]);
		$uri = '/ocs/v2.php/apps/istota/api/v1/sidecar/posted';
		$headers = (new RequestSigner())->headers(self::SECRET, 'POST', $uri, $body, time());
		$response = $this->h->sidecarController(new TestRequest('POST', $headers, [], $uri), $body)->posted();
		$this->assertSame(200, $response->getStatus());
		$this->assertSame(['posted' => ['ref-posted']], $response->getData());

		// Unsigned: refused, nothing read.
		$response = $this->h->sidecarController(new TestRequest('POST', [], [], $uri), $body)->posted();
		$this->assertSame(401, $response->getStatus());
		// Signed but malformed: a clear 400.
		$bad = '{"token":"room1","reference_ids":"ref-posted"}';
		$headers = (new RequestSigner())->headers(self::SECRET, 'POST', $uri, $bad, time());
		$response = $this->h->sidecarController(new TestRequest('POST', $headers, [], $uri), $bad)->posted();
		$this->assertSame(400, $response->getStatus());
	}
}
