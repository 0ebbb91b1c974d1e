<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCA\Talk\Manager;
use OCA\Talk\Room;
use OCP\Talk\IBroker;
use OCP\Talk\IConversation;
use OCP\Talk\IConversationOptions;

/**
 * Talk's public broker over the Manager stub: a conversation it makes is a group room the
 * Manager then knows. $created records name and moderators of each.
 */
final class TestBroker implements IBroker {
	/** @var list<array{token: string, name: string, moderators: list<string>}> */
	public array $created = [];
	public ?\Throwable $failure = null;
	private int $next = 1;

	public function __construct(
		private readonly Manager $manager,
	) {
	}

	public function hasBackend(): bool {
		return true;
	}

	public function newConversationOptions(): IConversationOptions {
		return new class implements IConversationOptions {
			private bool $public = false;

			public function isPublic(): bool {
				return $this->public;
			}

			public function setPublic(bool $isPublic = true): IConversationOptions {
				$this->public = $isPublic;
				return $this;
			}
		};
	}

	public function createConversation(string $name, array $moderators, ?IConversationOptions $options = null): IConversation {
		if ($this->failure !== null) {
			throw $this->failure;
		}
		$token = sprintf('home%04d', $this->next++);
		$this->manager->addRoom(new Room($options?->isPublic() ? Room::TYPE_PUBLIC : Room::TYPE_GROUP, $token));
		$this->created[] = ['token' => $token, 'name' => $name, 'moderators' => array_map(static fn ($u): string => $u->getUID(), $moderators)];
		return new class($token) implements IConversation {
			public function __construct(
				private readonly string $token,
			) {
			}

			public function getId(): string {
				return $this->token;
			}

			public function getAbsoluteUrl(): string {
				return 'https://cloud.example.com/call/' . $this->token;
			}
		};
	}
}
