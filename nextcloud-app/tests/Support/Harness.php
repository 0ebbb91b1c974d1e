<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Controller\AdminController;
use OCA\Istota\Controller\ApprovalsController;
use OCA\Istota\Controller\MailboxController;
use OCA\Istota\Controller\MeController;
use OCA\Istota\Controller\SidecarController;
use OCA\Istota\Controller\MemoryController;
use OCA\Istota\Controller\PersonalSettingsController;
use OCA\Istota\Controller\ScheduleController;
use OCA\Istota\Db\BotMessages;
use OCA\Istota\Db\OutboxMapper;
use OCA\Istota\Migration\Version000100Date20261122000000;
use OCA\Istota\Service\AddressingRule;
use OCA\Istota\Service\AdminService;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Service\AttachmentImporter;
use OCA\Istota\Service\BotAccount;
use OCA\Istota\Service\BotRegistration;
use OCA\Istota\Service\EventPayloadBuilder;
use OCA\Istota\Service\HomeConversation;
use OCA\Istota\Service\MemoryService;
use OCA\Istota\Service\ApprovalsService;
use OCA\Istota\Service\MailboxService;
use OCA\Istota\Service\MeService;
use OCA\Istota\Service\NextcloudDelegate;
use OCA\Istota\Service\OutboxFlusher;
use OCA\Istota\Service\RawBody;
use OCA\Istota\Service\RequestSigner;
use OCA\Istota\Service\SidecarReady;
use OCA\Istota\Service\InstallCommand;
use OCA\Istota\Service\PageState;
use OCA\Istota\Service\PersonalSettingsService;
use OCA\Istota\Service\ScheduleService;
use OCA\Istota\Service\SelfTest;
use OCA\Istota\Service\SessionService;
use OCA\Istota\Service\SetupService;
use OCA\Istota\Service\SidecarClient;
use OCA\Istota\Service\TalkEnvironment;
use OCA\Istota\Service\TalkEventForwarder;
use OCA\Istota\Service\UserProfile;
use OCA\Istota\Service\WsTokenMinter;
use OCA\Istota\SetupCheck\SidecarSetupCheck;
use OCA\Talk\Manager;
use OCA\Talk\Model\BotConversationMapper;
use OCA\Talk\Model\BotServer;
use OCA\Talk\Model\BotServerMapper;
use OCA\Talk\Room;
use OCA\Talk\Service\ParticipantService;

/**
 * Harness wires the app's real services the way Nextcloud's DI would, over the test
 * doubles: in-memory app config, a real SQLite database migrated by the app's own
 * migration, real HTTP, a file tree in a real temporary directory, and Talk's internal
 * classes in a container.
 */
final class Harness {
	public readonly MemoryAppConfig $appConfig;
	public readonly TestRandom $random;
	public readonly AppSettings $settings;
	public readonly StreamClientService $http;
	public readonly FixedClock $clock;
	public readonly SidecarClient $client;
	public readonly SqliteConnection $db;
	public readonly OutboxMapper $outbox;
	public readonly RecordingLogger $logger;
	public readonly OutboxFlusher $flusher;
	public readonly Directory $directory;
	public readonly TestAppManager $apps;
	public readonly TestContainer $container;
	public readonly TalkEnvironment $talk;
	public readonly EventPayloadBuilder $payloads;
	public readonly TestFiles $files;
	public readonly AttachmentImporter $attachments;
	public readonly TalkEventForwarder $forwarder;
	public readonly RecordingDispatcher $dispatcher;
	public readonly BotRegistration $registration;
	public readonly BotAccount $account;
	public readonly MemoryCacheFactory $cache;
	public readonly UserProfile $profiles;
	public readonly SessionService $sessions;
	public readonly TestUserSession $session;
	public readonly TestUrlGenerator $urls;
	public readonly TestL10N $l10n;
	public readonly TestJobList $jobs;
	public readonly Manager $rooms;
	public readonly TestBroker $broker;
	public readonly BotConversationMapper $botConversations;
	public readonly ParticipantService $participants;
	public readonly TestShareManager $shareManager;
	private readonly string $dbPath;

	/** The id of the Istota bot in the tests' Talk. */
	public const BOT_ID = 7;

	/** Where the app is installed in the tests' Nextcloud. */
	public const APP_PATH = '/var/www/nextcloud/custom_apps/istota';
	/** The app's version in this test instance. */
	public const APP_VERSION = '0.1.0';

	/**
	 * @param array<string, array{0: int, 1: int}> $rooms Talk conversations: token => [type, user count]
	 */
	public function __construct(string $sidecarUrl, ?string $sharedSecret = null, array $rooms = []) {
		$this->appConfig = new MemoryAppConfig();
		$this->random = new TestRandom();
		$this->settings = new AppSettings($this->appConfig, $this->random);
		$this->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_SIDECAR_URL, $sidecarUrl);
		if ($sharedSecret !== null) {
			$this->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_SHARED_SECRET, $sharedSecret, lazy: true, sensitive: true);
		}
		$this->http = new StreamClientService();
		$this->clock = new FixedClock();
		$this->client = new SidecarClient($this->http, $this->settings, new RequestSigner(), $this->clock);

		$this->dbPath = sys_get_temp_dir() . '/istota-test-' . bin2hex(random_bytes(6)) . '.sqlite';
		$this->db = new SqliteConnection($this->dbPath);
		SqliteSchema::migrate($this->db, new Version000100Date20261122000000(), new RecordingOutput());
		$this->outbox = new OutboxMapper($this->db);
		$this->logger = new RecordingLogger();
		$this->flusher = new OutboxFlusher($this->outbox, $this->client, $this->clock, $this->logger);

		$this->directory = new Directory();
		$this->apps = new TestAppManager(['spreed' => '21.1.0', Application::APP_ID => self::APP_VERSION], [Application::APP_ID => self::APP_PATH]);
		$roomObjects = [];
		$counts = [];
		foreach ($rooms as $token => [$type, $count]) {
			$roomObjects[$token] = new Room($type, $token);
			$counts[$token] = $count;
		}
		$this->rooms = new Manager($roomObjects);
		$this->broker = new TestBroker($this->rooms);
		$this->botConversations = new BotConversationMapper();
		$this->participants = new ParticipantService($counts);
		$this->shareManager = new TestShareManager();
		$this->container = new TestContainer([
			Manager::class => $this->rooms,
			ParticipantService::class => $this->participants,
			'OCP\Talk\IBroker' => $this->broker,
			BotServerMapper::class => new BotServerMapper([new BotServer(self::BOT_ID, AppSettings::BOT_URL)]),
			BotConversationMapper::class => $this->botConversations,
		]);
		$this->dispatcher = new RecordingDispatcher();
		$this->talk = new TalkEnvironment($this->apps, $this->container, $this->logger, $this->dispatcher);
		$this->jobs = new TestJobList();
		$this->profiles = new UserProfile($this->directory, $this->directory);
		$this->payloads = new EventPayloadBuilder($this->directory, $this->profiles, $this->talk, $this->clock);
		$this->cache = new MemoryCacheFactory($this->clock);
		$this->sessions = new SessionService($this->directory, $this->profiles, $this->client, $this->settings, $this->cache);
		$this->files = new TestFiles(substr($this->dbPath, 0, -strlen('.sqlite')) . '-data', $this->directory);
		$this->attachments = new AttachmentImporter($this->files, $this->directory, $this->settings, $this->sessions, $this->logger);
		$this->session = new TestUserSession();
		$this->forwarder = new TalkEventForwarder($this->settings, $this->payloads, $this->attachments, $this->client, $this->outbox, $this->flusher, new AddressingRule(), $this->clock, $this->logger, $this->session);
		$this->registration = new BotRegistration($this->settings, $this->talk, $this->dispatcher);
		$this->account = new BotAccount($this->directory, $this->settings, $this->random);
		$this->urls = new TestUrlGenerator();
		$this->l10n = new TestL10N();
	}

	/** Logs $uid in for the controllers (null: nobody is logged in). */
	public function loginAs(?string $uid): void {
		$this->session->user = $uid === null ? null : $this->directory->get($uid);
	}

	/**
	 * The controllers are built anew for every call, as Nextcloud builds its services per
	 * request; the memory cache and the sidecar are shared, as between real requests.
	 */
	public function meController(): MeController {
		return new MeController(new TestRequest(), $this->session, $this->l10n, $this->logger,
			new MeService($this->sessionService(), $this->client), $this->wsTokens());
	}

	public function approvalsController(): ApprovalsController {
		return new ApprovalsController(new TestRequest(), $this->session, $this->l10n, $this->logger,
			new ApprovalsService($this->sessionService(), $this->client));
	}

	public function mailboxController(): MailboxController {
		return new MailboxController(new TestRequest(), $this->session, $this->l10n, $this->logger,
			new MailboxService($this->sessionService(), $this->client));
	}

	public function sessionService(): SessionService {
		return new SessionService($this->directory, $this->profiles, $this->client, $this->settings, $this->cache);
	}

	public function memoryController(): MemoryController {
		return new MemoryController(new TestRequest(), $this->session, $this->l10n, $this->logger, new MemoryService($this->client, $this->sessionService()));
	}

	public function scheduleController(): ScheduleController {
		return new ScheduleController(new TestRequest(), $this->session, $this->l10n, $this->logger, new ScheduleService($this->client, $this->sessionService()));
	}

	public function personalSettingsController(): PersonalSettingsController {
		return new PersonalSettingsController(new TestRequest(), $this->session, $this->l10n, $this->logger, new PersonalSettingsService($this->client, $this->sessionService()));
	}

	public function adminController(): AdminController {
		return new AdminController(new TestRequest(), $this->session, $this->l10n, $this->logger, $this->adminService());
	}

	public function adminService(): AdminService {
		return new AdminService($this->client, $this->apps, $this->jobs);
	}

	public function wsTokens(): WsTokenMinter {
		return new WsTokenMinter($this->settings, $this->clock, $this->urls);
	}

	public function pageState(): PageState {
		return new PageState($this->settings, $this->apps, $this->directory, $this->urls, $this->directory, $this->installCommand());
	}

	public function setupCheck(): SidecarSetupCheck {
		return new SidecarSetupCheck($this->settings, $this->client, $this->talk, $this->apps, $this->l10n);
	}

	public function selfTest(): SelfTest {
		return new SelfTest($this->settings, $this->client, $this->talk, $this->outbox);
	}

	public function sidecarController(TestRequest $request, string $body = ''): SidecarController {
		return new SidecarController($request, $this->session, $this->l10n, $this->logger,
			new SidecarReady($this->settings, new RequestSigner(), $this->flusher, $this->clock, new BotMessages($this->db), $this->jobs),
			new class($body) extends RawBody {
				public function __construct(private readonly string $body) {
				}

				public function read(): string {
					return $this->body;
				}
			},
			$this->nextcloudDelegate());
	}

	public function nextcloudDelegate(): NextcloudDelegate {
		return new NextcloudDelegate($this->settings, new RequestSigner(), $this->clock, $this->directory, $this->directory,
			$this->files, $this->shareManager, $this->urls, $this->talk, $this->logger);
	}

	public function installCommand(): InstallCommand {
		return new InstallCommand($this->apps, $this->client, $this->settings);
	}

	public function setupService(): SetupService {
		return new SetupService($this->settings, $this->registration, $this->account, $this->directory);
	}

	public function homeConversation(): HomeConversation {
		return new HomeConversation($this->directory, $this->directory, $this->sessionService(), $this->client, $this->talk, $this->settings, $this->cache, $this->logger);
	}

	public function close(): void {
		$this->files->destroy();
		@unlink($this->dbPath);
	}
}
