<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Tests\Support\HarnessTestCase;

/**
 * "Your mailbox" end to end: controller → service → signed HTTP → the fake sidecar. The
 * user is always the session's, and the password only travels to the sidecar: it is in
 * no answer and no log line.
 */
class MailboxApiTest extends HarnessTestCase {
	private const PASSWORD = 'imap-secret-42';

	protected function setUp(): void {
		parent::setUp();
		$this->h->directory->addUser('alice', 'Alice', 'alice@example.com');
		$this->h->directory->addUser('bob', 'Bob', 'bob@example.com');
		$this->h->loginAs('alice');
	}

	public function testConnectTestAndDisconnectOwnMailbox(): void {
		$c = $this->h->mailboxController();
		$this->assertFalse($c->get()->getData()['connected']);

		$response = $c->connect('imap.example.com', '993', 'tls', 'alice@example.com', self::PASSWORD);
		$this->assertSame(200, $response->getStatus());
		$data = $response->getData();
		$this->assertTrue($data['connected']);
		$this->assertSame('alice@example.com', $data['username']);
		$this->assertArrayNotHasKey('password', $data);
		// The port arrives as a number and the password exactly as typed, for alice only.
		$put = array_values(array_filter(self::$sidecar->bodies(), static fn (array $b): bool => $b['method'] === 'PUT'));
		$this->assertSame('/v1/users/alice/mailbox', $put[0]['path']);
		$this->assertSame(['host' => 'imap.example.com', 'port' => 993, 'tls' => 'tls', 'username' => 'alice@example.com', 'password' => self::PASSWORD], $put[0]['body']);

		$this->assertSame('2026-11-26T11:00:00Z', $c->test()->getData()['checked_at']);

		// Bob sees only his own: nothing.
		$this->h->loginAs('bob');
		$this->assertFalse($this->h->mailboxController()->get()->getData()['connected']);
		$this->assertSame(404, $this->h->mailboxController()->test()->getStatus());
		$this->h->loginAs('alice');

		$this->assertFalse($c->disconnect()->getData()['connected']);
		$this->assertFalse($c->get()->getData()['connected']);
		$this->assertStringNotContainsString(self::PASSWORD, $this->h->logger->dump());
	}

	public function testWrongPasswordNamesTheFieldWithoutTheSecret(): void {
		$response = $this->h->mailboxController()->connect('imap.example.com', 993, 'tls', 'alice@example.com', 'not-the-password-7');
		$this->assertSame(422, $response->getStatus());
		$data = $response->getData();
		$this->assertSame('invalid_settings', $data['code']);
		$this->assertStringContainsString('refused the user name', $data['fields']['password']);
		// Counted for brute-force protection; a bad host is not.
		$this->assertTrue($response->isThrottled());
		$this->assertSame(['action' => 'istota_mailbox'], $response->getThrottleMetadata());
		$this->assertFalse($this->h->mailboxController()->connect('', 993, 'tls', 'alice@example.com', 'x')->isThrottled());
		$this->assertStringNotContainsString('not-the-password-7', json_encode($data));
		$this->assertStringNotContainsString('not-the-password-7', $this->h->logger->dump());
	}

	public function testBadInputIsRefusedByTheApp(): void {
		$c = $this->h->mailboxController();
		foreach ([
			[$c->connect('imap.example.com', 993, 'none', 'a', 'b'), 'tls'],
			[$c->connect('imap.example.com', 70000, 'tls', 'a', 'b'), 'port'],
			[$c->connect(['x'], 993, 'tls', 'a', 'b'), 'host'],
			[$c->connect('imap.example.com', 993, 'tls', 'a', str_repeat('x', 2000)), 'password'],
		] as [$response, $field]) {
			$this->assertSame(400, $response->getStatus(), $field);
			$this->assertStringContainsString($field, $response->getData()['message']);
		}
		$puts = array_filter(self::$sidecar->bodies(), static fn (array $b): bool => $b['method'] === 'PUT');
		$this->assertSame([], $puts);
	}

	public function testNotLoggedInIsRefusedBeforeTheSidecarIsAsked(): void {
		$this->h->loginAs(null);
		$c = $this->h->mailboxController();
		$this->assertSame(401, $c->get()->getStatus());
		$this->assertSame(401, $c->connect('imap.example.com', 993, 'tls', 'a', self::PASSWORD)->getStatus());
		$this->assertSame(401, $c->disconnect()->getStatus());
		$this->assertSame([], self::$sidecar->requests());
	}
}
