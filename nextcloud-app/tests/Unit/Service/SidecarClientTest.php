<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\Exception\SidecarNotConfiguredException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCA\Istota\Exception\SidecarUnavailableException;
use OCA\Istota\Service\RequestSigner;
use OCA\Istota\Service\SidecarClient;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Istota\Tests\Support\StreamClientService;

/**
 * SidecarClient against a real HTTP server (the fake sidecar) that verifies signatures as
 * the protocol says.
 */
class SidecarClientTest extends HarnessTestCase {
	public function testHealthIsUnsigned(): void {
		$health = $this->h->client->health();
		$this->assertSame(['status' => 'ok', 'version' => 'fake-1.2.3', 'schema' => 1], $health);
		$request = $this->h->http->requests[0];
		$this->assertArrayNotHasKey('X-Istota-Signature', $request['options']['headers']);
	}

	public function testPingRoundTripIsSignedAndAccepted(): void {
		$pong = $this->h->client->ping('echo-me');
		$this->assertSame('echo-me', $pong['pong']);
		$this->assertSame([['method' => 'POST', 'uri' => '/v1/ping', 'status' => 200]], self::$sidecar->requests());
	}

	public function testRequestOptionsFollowNextcloudRules(): void {
		$this->h->client->postTalkEvent($this->eventBody('7'), 0.4, 0.2);
		$options = $this->h->http->requests[0]['options'];
		$this->assertSame(['allow_local_address' => true], $options['nextcloud']);
		$this->assertFalse($options['http_errors']);
		$this->assertSame(0.4, $options['timeout']);
		$this->assertSame(0.2, $options['connect_timeout']);
		$this->assertSame('application/json', $options['headers']['Content-Type']);
	}

	public function testTalkEventAnswerIsReturned(): void {
		self::$sidecar->control(['addressed' => true]);
		$answer = $this->h->client->postTalkEvent($this->eventBody('7'), 2.0, 1.0);
		$this->assertTrue($answer['addressed']);
		$this->assertSame('accepted', $answer['status']);
		$this->assertSame(['ok8wuc9k/7'], self::$sidecar->eventKeys());
	}

	public function testWrongSecretIsARetryableRejection(): void {
		$h = new Harness(self::$sidecar->url, 'some-other-secret-of-sufficient-length-0123456789');
		try {
			$h->client->ping('x');
			$this->fail('expected a rejection');
		} catch (SidecarRejectedException $e) {
			$this->assertSame(401, $e->getHttpStatus());
			$this->assertSame('bad_signature', $e->getErrorCode());
			$this->assertFalse($e->isPermanent(), 'a fixed secret makes redelivery work');
			$this->assertStringNotContainsString('some-other-secret', $e->getMessage());
		} finally {
			$h->close();
		}
	}

	public function testStaleTimestampIsRefused(): void {
		$this->h->clock->now = time() - 3600;
		$this->expectException(SidecarRejectedException::class);
		$this->expectExceptionMessage('stale_request');
		$this->h->client->ping('x');
	}

	public function testMissingSecretMeansNotConfiguredAndNoRequest(): void {
		$h = new Harness(self::$sidecar->url, null);
		try {
			$this->expectException(SidecarNotConfiguredException::class);
			$h->client->ping('x');
		} finally {
			$this->assertSame([], $h->http->requests);
			$h->close();
		}
	}

	public function testBadSidecarUrlMeansNotConfigured(): void {
		$h = new Harness('ftp://127.0.0.1:1', self::SECRET);
		try {
			$this->expectException(SidecarNotConfiguredException::class);
			$h->client->health();
		} finally {
			$h->close();
		}
	}

	public function testDownSidecarIsUnavailable(): void {
		$h = new Harness(FakeSidecar::deadUrl(), self::SECRET);
		try {
			$h->client->postTalkEvent($this->eventBody('7'), 0.4, 0.2);
			$this->fail('expected unavailable');
		} catch (SidecarUnavailableException $e) {
			$this->assertNull($e->getHttpStatus());
		} finally {
			$h->close();
		}
	}

	public function testServerErrorIsUnavailable(): void {
		self::$sidecar->control(['talk_status' => 503]);
		try {
			$this->h->client->postTalkEvent($this->eventBody('7'), 2.0, 1.0);
			$this->fail('expected unavailable');
		} catch (SidecarUnavailableException $e) {
			$this->assertSame(503, $e->getHttpStatus());
			$this->assertStringContainsString('unavailable', $e->getMessage());
		}
	}

	public function testMalformedEventIsAPermanentRejection(): void {
		try {
			$this->h->client->postTalkEvent('{"not":"an event"}', 2.0, 1.0);
			$this->fail('expected a rejection');
		} catch (SidecarRejectedException $e) {
			$this->assertSame(400, $e->getHttpStatus());
			$this->assertSame('invalid_event', $e->getErrorCode());
			$this->assertTrue($e->isPermanent());
		}
	}

	public function testSlowSidecarTimesOut(): void {
		self::$sidecar->control(['event_delay_ms' => 1500]);
		$this->expectException(SidecarUnavailableException::class);
		$this->h->client->postTalkEvent($this->eventBody('7'), 0.2, 0.1);
	}

	/**
	 * The fake must refuse what the real sidecar refuses, or the tests above prove nothing.
	 *
	 * @return array<string, array{0: callable(array): array, 1: string}>
	 */
	public function tamperedRequests(): array {
		return [
			'no headers' => [static fn (array $h): array => [], 'missing_signature'],
			'short nonce' => [static fn (array $h): array => ['X-Istota-Nonce' => 'abc'] + $h, 'malformed_signature'],
			'unknown version' => [static fn (array $h): array => ['X-Istota-Signature' => 'v2=' . substr($h['X-Istota-Signature'], 3)] + $h, 'malformed_signature'],
			'changed signature' => [static fn (array $h): array => ['X-Istota-Signature' => 'v1=' . str_repeat('0', 64)] + $h, 'bad_signature'],
		];
	}

	/**
	 * @dataProvider tamperedRequests
	 * @param callable(array): array $tamper
	 */
	public function testFakeSidecarRefusesTamperedRequests(callable $tamper, string $code): void {
		$headers = (new RequestSigner())->headers(self::SECRET, 'POST', '/v1/ping', '{"nonce_echo":"x"}', time());
		[$status, $body] = $this->raw($tamper($headers), '{"nonce_echo":"x"}');
		$this->assertSame(401, $status);
		$this->assertSame($code, $body['error']['code']);
	}

	public function testFakeSidecarRefusesReplays(): void {
		$headers = (new RequestSigner())->headers(self::SECRET, 'POST', '/v1/ping', '{"nonce_echo":"x"}', time());
		$this->assertSame(200, $this->raw($headers, '{"nonce_echo":"x"}')[0]);
		[$status, $body] = $this->raw($headers, '{"nonce_echo":"x"}');
		$this->assertSame(401, $status);
		$this->assertSame('replayed_request', $body['error']['code']);
	}

	/** @return array<string, array{0: string, 1: string, 2: array<string, scalar>, 3: string}> */
	public function userPaths(): array {
		return [
			'plain' => ['alice', 'status', [], '/v1/users/alice/status'],
			'address' => ['alice@example.com', 'status', ['limit' => 10], '/v1/users/alice%40example.com/status?limit=10'],
			'spaces and slashes stay in one segment' => ['a b/c', 'memory/user', [], '/v1/users/a%20b%2Fc/memory/user'],
			'query in RFC 3986 form' => ['zoë', 'memory/search', ['q' => 'tea & cake', 'limit' => 5], '/v1/users/zo%C3%AB/memory/search?q=tea%20%26%20cake&limit=5'],
		];
	}

	/**
	 * @dataProvider userPaths
	 * @param array<string, scalar> $query
	 */
	public function testUserPathsEncodeTheUserAsOneSegment(string $uid, string $rest, array $query, string $want): void {
		$this->assertSame($want, SidecarClient::userPath($uid, $rest, $query));
	}

	public function testAnEmptyUserIdIsRefused(): void {
		$this->expectException(\InvalidArgumentException::class);
		SidecarClient::userPath('', 'status');
	}

	public function testBodiesAreAlwaysJsonObjects(): void {
		$this->assertSame('{}', SidecarClient::encode([]));
		$this->assertSame('{"a":[],"b":"ü/"}', SidecarClient::encode(['a' => [], 'b' => 'ü/']));
	}

	public function testSignedJsonCallsOfEveryVerbAreAccepted(): void {
		$this->h->directory->addUser('alice', 'Alice');
		$this->assertTrue($this->h->client->postJson(SidecarClient::userPath('alice', 'session'), ['groups' => [], 'is_admin' => false])['allowed']);
		$this->assertSame('', $this->h->client->getJson(SidecarClient::userPath('alice', 'memory/user'))['content']);
		$this->assertArrayHasKey('etag', $this->h->client->putJson(SidecarClient::userPath('alice', 'memory/user'), ['content' => 'x', 'etag' => '"' . hash('sha256', '') . '"']));
		$this->assertSame(['ok' => true], $this->h->client->deleteJson(SidecarClient::userPath('alice', 'memory/facts/1')));
		$this->assertSame([200, 200, 200, 200], array_column(self::$sidecar->requests(), 'status'));
		$this->assertSame(SidecarClient::PAGE_TIMEOUT, $this->h->http->requests[1]['options']['timeout']);
		$this->assertArrayNotHasKey('body', $this->h->http->requests[1]['options'], 'GET has no body');
		$this->assertArrayNotHasKey('Content-Type', $this->h->http->requests[3]['options']['headers'], 'DELETE has no body');
	}

	public function testRejectionsCarryFieldsAndTheCurrentEtag(): void {
		$this->h->client->postJson(SidecarClient::userPath('alice', 'session'), ['groups' => [], 'is_admin' => false]);
		try {
			$this->h->client->putJson(SidecarClient::userPath('alice', 'settings'), ['timezone' => 'Mars/Olympus']);
			$this->fail('expected a rejection');
		} catch (SidecarRejectedException $e) {
			$this->assertSame([422, 'invalid_settings', 'some settings are not valid'], [$e->getHttpStatus(), $e->getErrorCode(), $e->getSidecarMessage()]);
			$this->assertSame(['timezone' => 'not an IANA time zone'], $e->getFields());
			$this->assertTrue($e->isPermanent());
		}
		self::$sidecar->setUserMemory('alice', 'changed in Files');
		try {
			$this->h->client->putJson(SidecarClient::userPath('alice', 'memory/user'), ['content' => 'x', 'etag' => '"old"']);
			$this->fail('expected a conflict');
		} catch (SidecarRejectedException $e) {
			$this->assertSame([409, 'conflict'], [$e->getHttpStatus(), $e->getErrorCode()]);
			$this->assertSame('"' . hash('sha256', 'changed in Files') . '"', $e->getCurrentEtag());
			$this->assertSame([], $e->getFields());
		}
	}

	public function testServerErrorsCarryTheirCodeAndMessage(): void {
		self::$sidecar->control(['api_status' => 503]);
		try {
			$this->h->client->getJson('/v1/admin/health');
			$this->fail('expected unavailable');
		} catch (SidecarUnavailableException $e) {
			$this->assertSame([503, 'internal', 'internal error'], [$e->getHttpStatus(), $e->getErrorCode(), $e->getSidecarMessage()]);
		}
	}

	/** @return array{0: int, 1: array} */
	private function raw(array $headers, string $body): array {
		$response = (new StreamClientService())->newClient()->request('POST', self::$sidecar->url . '/v1/ping', [
			'headers' => $headers + ['Content-Type' => 'application/json'],
			'body' => $body,
			'http_errors' => false,
			'timeout' => 5,
			'nextcloud' => ['allow_local_address' => true],
		]);
		return [$response->getStatusCode(), json_decode((string)$response->getBody(), true)];
	}

	private function eventBody(string $messageId): string {
		return json_encode([
			'bot_url' => 'nextcloudapp://istota',
			'event' => ['type' => 'Create', 'object' => ['id' => $messageId, 'content' => '{"message":"hi","parameters":[]}'], 'target' => ['id' => 'ok8wuc9k']],
			'sender' => null,
			'conversation' => ['token' => 'ok8wuc9k', 'name' => 'Room', 'type' => null, 'user_count' => null, 'private' => false],
			'received_at' => gmdate('Y-m-d\TH:i:sP'),
		], JSON_THROW_ON_ERROR);
	}
}
